/**
 * The container image, checked without building it (test/e2e/image.test.ts builds and runs it with
 * podman; there is no Docker engine here): the Dockerfile is parsed and what it promises is checked
 * against the code — a build stage and a runtime stage that gets only production dependencies, the
 * compiled dist/, the Lua scripts and the demo config; a numeric non-root user; the ports the
 * config schema defaults to; a HEALTHCHECK on the /readyz that nodes and routers serve; paths the
 * compiled code resolves (the CLI, lua/, cluster/demo.yaml) where the image puts them. Then
 * docker-compose.yml: every quotaring service runs that image (no source mounted, only the config
 * file), with commands the CLI has, every environment variable the code reads for that config, and
 * a stop grace that covers the node's drain and stream grace.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { AdminSchema, RouterSchema, ServerSchema } from '../../src/config/schema.ts';
import { envReads } from '../helpers/env-reads.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const text = (rel: string): string => readFileSync(resolve(ROOT, rel), 'utf8');

/** One Dockerfile instruction: keyword (upper case) and its arguments, continuation lines joined. */
interface Instruction {
  readonly op: string;
  readonly args: string;
}
/** A build stage: its FROM line and instructions. */
interface Stage {
  readonly from: string;
  readonly name: string | undefined;
  readonly body: Instruction[];
}

/** Parses a Dockerfile into its global ARGs and stages (comments dropped, `\` continuations joined). */
function parseDockerfile(source: string): { args: Map<string, string>; stages: Stage[] } {
  const lines: string[] = [];
  let pending = '';
  for (const raw of source.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('#') || line === '') continue;
    if (line.endsWith('\\')) {
      pending += `${line.slice(0, -1).trim()} `;
      continue;
    }
    lines.push(pending + line);
    pending = '';
  }
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  for (const line of lines) {
    const m = /^(\S+)\s+(.*)$/.exec(line);
    assert.ok(m, line);
    const op = (m[1] as string).toUpperCase();
    const rest = m[2] as string;
    if (op === 'FROM') {
      const from = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
      assert.ok(from, line);
      const image = (from[1] as string).replace(/\$\{(\w+)\}/g, (_, name: string) => args.get(name) ?? '');
      stages.push({ from: image, name: from[2], body: [] });
    } else if (stages.length === 0) {
      assert.equal(op, 'ARG', `only ARG before the first FROM: ${line}`);
      const [name, value] = rest.split('=');
      args.set(name as string, value ?? '');
    } else {
      (stages.at(-1) as Stage).body.push({ op, args: rest });
    }
  }
  return { args, stages };
}

const { args, stages } = parseDockerfile(text('Dockerfile'));
const runtime = stages.at(-1) as Stage;
const all = (stage: Stage, op: string): string[] => stage.body.filter((i) => i.op === op).map((i) => i.args);
const jsonArgs = (stage: Stage, op: string): string[] => JSON.parse(all(stage, op).at(-1) ?? '[]') as string[];

const SERVER = ServerSchema.parse({});
const ROUTER = RouterSchema.parse({});
const ADMIN = AdminSchema.parse({});

describe('Dockerfile', () => {
  test('is multi-stage: a build stage compiles, a production-dependencies stage installs with --omit=dev, the runtime stage installs nothing', () => {
    assert.equal(args.get('NODE_IMAGE'), 'node:20-bookworm-slim');
    assert.deepEqual(stages.map((s) => [s.name, s.from]), [
      ['build', 'node:20-bookworm-slim'],
      ['prod-deps', 'node:20-bookworm-slim'],
      ['runtime', 'node:20-bookworm-slim'],
    ]);
    const build = stages[0] as Stage;
    assert.ok(all(build, 'RUN').includes('npm run build'));
    assert.match(all(stages[1] as Stage, 'RUN').join('\n'), /^npm ci --omit=dev /);
    assert.deepEqual(all(runtime, 'RUN').filter((r) => /\bnpm\b/.test(r)), [], 'no npm in the runtime stage');
  });

  test('the runtime stage copies production dependencies, dist/, lua/, package.json and the demo config only: no sources, tests or dev dependencies', () => {
    assert.deepEqual(all(runtime, 'COPY'), [
      '--from=prod-deps /src/node_modules ./node_modules',
      '--from=build /src/dist ./dist',
      'package.json ./',
      'lua ./lua',
      'cluster/demo.yaml ./cluster/demo.yaml',
    ]);
    // Whatever is copied from the build context exists and is not excluded by .dockerignore.
    const ignored = text('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
    for (const stage of stages) {
      for (const copy of all(stage, 'COPY').filter((c) => !c.startsWith('--from='))) {
        const sources = copy.split(/\s+/).slice(0, -1);
        for (const source of sources) {
          assert.ok(existsSync(resolve(ROOT, source)), `COPY ${source}: not in the repo`);
          assert.ok(!ignored.some((i) => source === i || source.startsWith(`${i}/`)), `COPY ${source}: excluded by .dockerignore`);
        }
      }
    }
    for (const must of ['.git', 'node_modules', 'dist', '.env']) assert.ok(ignored.includes(must), `.dockerignore: ${must}`);
  });

  test('runs as a numeric non-root user, in a working directory that user owns (server.state_dir is relative to it)', () => {
    const user = all(runtime, 'USER').at(-1) ?? '';
    assert.match(user, /^[1-9]\d*:[1-9]\d*$/, 'numeric uid:gid, so Kubernetes runAsNonRoot can verify it');
    const index = runtime.body.findIndex((i) => i.op === 'USER');
    assert.deepEqual(runtime.body.slice(index).filter((i) => i.op === 'RUN' || i.op === 'COPY'), [], 'nothing runs or is copied after USER');
    const workdir = all(runtime, 'WORKDIR').at(-1) ?? '';
    assert.ok(all(runtime, 'RUN').some((r) => r.includes(`chown ${user} ${workdir}`)), `${workdir} owned by ${user}`);
    assert.equal(SERVER.state_dir, '.quotaring-state', 'relative: lands in the working directory');
  });

  test('exposes the ports the config schema defaults to: API 8080 (node and router), node admin 9100, router admin 9200', () => {
    const exposed = all(runtime, 'EXPOSE').flatMap((e) => e.split(/\s+/)).map(Number).sort();
    assert.deepEqual(exposed, [...new Set([SERVER.port, ROUTER.port, ADMIN.port, ADMIN.router_port])].sort());
    assert.deepEqual(exposed, [8080, 9100, 9200]);
  });

  test('HEALTHCHECK asks /readyz on the API port (QUOTARING_HEALTH_PORT, default the schema\'s 8080), which both the node and the router serve', () => {
    const healthcheck = all(runtime, 'HEALTHCHECK').at(-1) ?? '';
    const cmd = JSON.parse(healthcheck.slice(healthcheck.indexOf('CMD ') + 4)) as string[];
    assert.equal(cmd[0], 'node');
    assert.match(cmd[2] ?? '', new RegExp(`fetch\\('http://127\\.0\\.0\\.1:' \\+ \\(process\\.env\\.QUOTARING_HEALTH_PORT \\|\\| ${SERVER.port}\\) \\+ '/readyz'\\)`));
    assert.equal(SERVER.port, ROUTER.port, 'one default for both');
    assert.match(cmd[2] ?? '', /process\.exit\(r\.ok \? 0 : 1\)/);
    assert.match(text('src/gateway/server.ts'), /app\.get\('\/readyz'/);
    assert.match(text('src/router/server.ts'), /app\.get\('\/readyz'/);
  });

  test('the entry point is the compiled CLI, and the files the compiled code resolves (lua/, cluster/demo.yaml) are where the image puts them', () => {
    const tsconfig = JSON.parse(text('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } };
    assert.deepEqual([tsconfig.compilerOptions.outDir, tsconfig.compilerOptions.rootDir], ['dist', '.']);
    assert.deepEqual(jsonArgs(runtime, 'ENTRYPOINT'), ['node', '/app/dist/src/cli.js']);
    assert.ok(existsSync(resolve(ROOT, 'src/cli.ts')));
    // In the image: /app/dist/src/redis/lua-scripts.js resolves lua/ relative to itself.
    const luaRelative = /: `(\.\.\/\.\.\/\.\.\/lua\/)\$\{file\}`/.exec(text('src/redis/lua-scripts.ts'))?.[1];
    assert.equal(new URL(`${luaRelative}token-bucket.lua`, 'file:///app/dist/src/redis/lua-scripts.js').pathname, '/app/lua/token-bucket.lua');
    const demoRelative = /: '(\.\.\/\.\.\/cluster\/demo\.yaml)'/.exec(text('cluster/demo.ts'))?.[1];
    assert.equal(new URL(demoRelative ?? '', 'file:///app/dist/cluster/demo.js').pathname, '/app/cluster/demo.yaml');
  });
});

interface ComposeService {
  build?: string;
  image?: string;
  command?: string[];
  volumes?: string[];
  environment?: Record<string, string>;
  healthcheck?: { test: string[] };
  stop_grace_period?: string;
}

describe('docker-compose.yml runs the image', () => {
  const services = (parse(text('docker-compose.yml'), { merge: true }) as { services: Record<string, ComposeService> }).services;
  const quotaring = ['simulator', 'node1', 'node2', 'node3', 'router'];
  const cliCommands = [...text('src/cli.ts').matchAll(/\.command\('([a-z]+)'\)/g)].map((m) => m[1]);

  test('every quotaring service builds and runs this Dockerfile\'s image; only the config file is mounted, read-only', () => {
    for (const name of quotaring) {
      const svc = services[name] as ComposeService;
      assert.equal(svc.build, '.', name);
      assert.equal(svc.image, 'quotaring:local', name);
      assert.deepEqual(svc.volumes, ['./cluster/compose.yaml:/etc/quotaring/config.yaml:ro'], name);
      assert.ok(cliCommands.includes(svc.command?.[0]), `${name}: ${svc.command?.[0]} is not a quotaring command`);
    }
    assert.doesNotMatch(text('docker-compose.yml'), /"\.:\/app"|dist\/src\/cli\.js/);
  });

  test('nodes and the router are given the mounted config and keep the image\'s /readyz HEALTHCHECK; the simulator (no /readyz) has its own', () => {
    for (const name of ['node1', 'node2', 'node3', 'router']) {
      const command = services[name]?.command ?? [];
      assert.equal(command[command.indexOf('--config') + 1], '/etc/quotaring/config.yaml', name);
      assert.equal(services[name]?.healthcheck, undefined, `${name}: inherits the image's HEALTHCHECK`);
    }
    assert.match(services.simulator?.healthcheck?.test.join(' ') ?? '', /127\.0\.0\.1:9090\/sim\/stats/);
  });

  test('every environment variable the code reads for cluster/compose.yaml is given to the nodes and the router', () => {
    const { names, loaded } = envReads(resolve(ROOT, 'cluster/compose.yaml'));
    assert.deepEqual(names, ['QUOTARING_ADMIN_TOKEN', 'QUOTARING_CLUSTER_SECRET', 'QUOTARING_CLUSTER_SECRET_PREVIOUS', 'QUOTARING_SIM_KEY']);
    for (const name of ['node1', 'node2', 'node3', 'router']) {
      assert.deepEqual(names.filter((n) => services[name]?.environment?.[n] === undefined), [], name);
    }
    // The image's HEALTHCHECK probes 8080: the port the config gives both listeners.
    assert.deepEqual([loaded.config.server.port, loaded.config.router.port], [8080, 8080]);
  });

  test('the stop grace covers a node\'s drain and stream grace (cluster.handoff.drain + grace)', () => {
    const { loaded } = envReads(resolve(ROOT, 'cluster/compose.yaml'));
    const handoff = loaded.config.cluster.handoff;
    for (const name of ['node1', 'node2', 'node3']) {
      const grace = Number(/^(\d+)s$/.exec(services[name]?.stop_grace_period ?? '')?.[1]) * 1_000;
      assert.ok(grace > handoff.drain + handoff.grace, `${name}: ${grace} ms ≤ ${handoff.drain} + ${handoff.grace} ms`);
    }
  });

  test('the README says the image is built and run here with podman, by the image test', () => {
    assert.match(text('README.md'), /The image is built and run here with podman/);
    assert.ok(existsSync(resolve(ROOT, 'test/e2e/image.test.ts')));
  });
});

/**
 * End to end: `quotaring up` (what `npm start` runs) as a real child process of the built CLI —
 * the banner, one OpenAI SDK and one Anthropic SDK call through the router with a demo key, Ctrl-C
 * (SIGINT) stopping every child with exit code 0; a node leaving while another runs (up keeps
 * serving); the last node dying taking the others down with exit code 1; and the argument checks.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from 'node:net';
import { describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { BANNER_HEADLINE } from '../../cluster/banner.ts';
import { bindable, CLI, freePort, freePortRun } from '../helpers/processes.ts';

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
async function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** `n` consecutive free ports, none in `avoid`. */
async function freeRange(n: number, avoid: readonly number[]): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const first = await freePort();
    const ports = Array.from({ length: n }, (_, i) => first + i);
    if (ports.some((p) => avoid.includes(p) || p > 65_535)) continue;
    if ((await Promise.all(ports.map(bindable))).every(Boolean)) return first;
  }
  throw new Error(`no ${n} consecutive free ports`);
}

/** Runs the CLI to completion; @returns its exit code and output. */
async function runToExit(args: readonly string[], env?: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...(env === undefined ? {} : { env: { ...process.env, ...env } }) });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(proc, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

/** A running `quotaring up` on free ports, after its banner. */
interface RunningUp {
  readonly proc: ReturnType<typeof spawn>;
  readonly routerPort: number;
  readonly nodePort: number;
  /** First admin port: the router's, then the nodes'. */
  readonly adminPort: number;
  readonly simPort: number;
  /** Everything it printed so far (stdout and stderr). */
  out(): string;
  /** Resolves with the exit code and signal. */
  readonly exited: Promise<[number | null, NodeJS.Signals | null]>;
  /** SIGKILLs it if it still runs (for `finally`). */
  kill(): Promise<void>;
  /** SIGINTs it if it still runs and waits until it exited (it waits for its children), SIGKILL after `ms`. */
  stop(ms?: number): Promise<void>;
}

/** Free ports for `up --nodes N`. */
async function upPorts(nodes: number): Promise<{ routerPort: number; simPort: number; nodePort: number; adminPort: number; args: string[] }> {
  const routerPort = await freePort();
  const simPort = await freeRange(1, [routerPort]);
  const nodePort = await freeRange(nodes, [routerPort, simPort]);
  const adminPort = await freePortRun(nodes + 1);
  return { routerPort, simPort, nodePort, adminPort, args: ['--nodes', String(nodes), '--port', String(routerPort), '--node-port', String(nodePort), '--simulator-port', String(simPort), '--admin-port', String(adminPort)] };
}

/**
 * Starts `quotaring up --nodes N` on free ports (with `extra` arguments) and waits for its banner.
 * @throws with its output if it exits first.
 */
async function startUp(nodes: number, extra: readonly string[] = [], ports?: Awaited<ReturnType<typeof upPorts>>, env?: Record<string, string>, cwd?: string): Promise<RunningUp> {
  const { routerPort, simPort, nodePort, adminPort, args } = ports ?? (await upPorts(nodes));
  const proc = spawn(process.execPath, [CLI, 'up', ...args, ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(cwd === undefined ? {} : { cwd }),
    ...(env === undefined ? {} : { env: { ...process.env, ...env } }),
  });
  let out = '';
  const exited = once(proc, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  const running: RunningUp = {
    proc,
    routerPort,
    nodePort,
    simPort,
    adminPort,
    out: () => out,
    exited,
    kill: async () => {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGKILL');
        await exited;
      }
    },
    stop: async (ms = 15_000) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGINT');
      const timer = setTimeout(() => proc.kill('SIGKILL'), ms);
      await exited;
      clearTimeout(timer);
    },
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const onData = (d: Buffer): void => {
        out += d.toString();
        if (out.includes('Press Ctrl-C')) resolve();
      };
      proc.stdout.on('data', onData);
      proc.stderr.on('data', onData);
      proc.once('exit', (code) => reject(new Error(`up exited with ${code} before its banner:\n${out}`)));
    });
  } catch (err) {
    await running.kill();
    throw err;
  }
  return running;
}

/** The pid of `up`'s child `name` (`node-N`, `router-1`, `simulator`) as its banner shows it. */
function pidOf(out: string, name: string): number {
  const line = name === 'router-1' ? /<- send requests here {3}pid (\d+)/ : name === 'simulator' ? /simulator {2}\S+ {3}pid (\d+)/ : new RegExp(`${name} +http://\\S+ {3}pid (\\d+)`);
  const pid = line.exec(out)?.[1];
  assert.ok(pid !== undefined, out);
  return Number(pid);
}

/** Waits until none of `ports` accepts connections, up to `ms`. @returns the ports still open. */
async function closedWithin(ports: readonly number[], ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const open = (await Promise.all(ports.map(async (p) => ((await listening(p)) ? p : undefined)))).filter((p): p is number => p !== undefined);
    if (open.length === 0 || Date.now() > deadline) return open;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('quotaring up', () => {
  test('the embedded catalogue: a tenant added with the CLI serves at once; after a restart of up it is still there', { timeout: 60_000 }, async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'quotaring-up-catalogue-'));
    const cli = (args: string[], token: string) => runToExit(args, { QUOTARING_ADMIN_TOKEN: token });
    const ask = async (port: number, key: string): Promise<number> => {
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
      try {
        await client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] });
        return 200;
      } catch (err) {
        return (err as { status?: number }).status ?? -1;
      }
    };
    const ports = await upPorts(1);
    let up = await startUp(1, [], ports, undefined, cwd);
    try {
      const token = /admin token: ([0-9a-f]+)/.exec(up.out())?.[1] ?? '';
      const admin = `http://127.0.0.1:${ports.adminPort}`;
      const added = await cli(['tenants', 'add', 'acme', '--plan', 'free', '--url', admin], token);
      assert.equal(added.code, 0, added.stderr);
      const key = (JSON.parse(added.stdout) as { key: { key: string } }).key.key;
      assert.match(key, /^qr_[a-z0-9]{16}_/);
      assert.equal(await ask(ports.routerPort, key), 200, 'the key serves at once');
      assert.equal(readFileSync(join(cwd, '.quotaring-state', 'catalogue.ndjson'), 'utf8').includes(key), false, 'the file holds the hash, never the key');
      up.proc.kill('SIGINT');
      assert.deepEqual(await up.exited, [0, null]);
      up = await startUp(1, [], ports, undefined, cwd);
      const again = /admin token: ([0-9a-f]+)/.exec(up.out())?.[1] ?? '';
      assert.equal(await ask(ports.routerPort, key), 200, 'still there after a restart');
      const shown = await cli(['tenants', 'show', 'acme', '--url', admin], again);
      assert.equal((JSON.parse(shown.stdout) as { plan: string }).plan, 'free');
      const refused = await cli(['tenants', 'add', 'acme', '--url', admin], again);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /^error: 409: /);
    } finally {
      // Stopped, not killed: a SIGKILLed `up` leaves its children writing their local copies into cwd
      // until they notice (ENOTEMPTY on the removal in CI); a stopped one exits after them.
      await up.stop();
      rmSync(cwd, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    }
  });

  test('2 nodes + 1 router with --logs: banner, SDK calls through the router, a log line per request, SIGINT stops every child and exits 0', { timeout: 20_000 }, async () => {
    const up = await startUp(2, ['--logs']);
    const { proc, routerPort, nodePort, simPort, adminPort, exited } = up;
    try {
      const out = up.out();
      const router = `http://127.0.0.1:${routerPort}`;
      // The admin APIs: the router's first, then the nodes'; the token printed works, no token gets 401.
      const token = /admin token: ([0-9a-f]{32}),/.exec(out)?.[1];
      assert.ok(token !== undefined, out);
      assert.ok(out.includes(`dashboard  http://127.0.0.1:${adminPort}/dashboard#token=${token}`), out);
      const ring = await fetch(`http://127.0.0.1:${adminPort}/admin/v1/ring`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(ring.status, 200);
      assert.deepEqual(((await ring.json()) as { members: { id: string }[] }).members.map((m) => m.id), ['node-1', 'node-2']);
      assert.equal((await fetch(`http://127.0.0.1:${adminPort + 1}/admin/v1/ring`)).status, 401);
      // No secret on a child's command line (readable by every user: ps, /proc/<pid>/cmdline); the token is in their environment.
      // (The simulator logs no pid; its arguments are `simulate --port ... --tps ... --ttft-ms ...`.)
      for (const name of ['node-1', 'node-2', 'router-1']) {
        const pid = pidOf(out, name);
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        assert.match(cmdline, /\0--config\0/, `${name}: ${cmdline}`);
        for (const secret of [token, 'sim-demo-key']) assert.ok(!cmdline.includes(secret), `${name}'s command line carries a secret: ${cmdline.split('\0').join(' ')}`);
        assert.ok(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`QUOTARING_ADMIN_TOKEN=${token}`), `${name} has the token in its environment`);
      }
      assert.match(out, new RegExp(`${BANNER_HEADLINE}: 1 router, 2 nodes`));
      assert.ok(out.includes(`routers    ${router}`), out);
      assert.match(out, new RegExp(`node-1   http://127\\.0\\.0\\.1:${nodePort}   pid \\d+\n`));
      assert.match(out, new RegExp(`node-2   http://127\\.0\\.0\\.1:${nodePort + 1}   pid \\d+\n`));
      assert.match(out, new RegExp(`simulator  http://127\\.0\\.0\\.1:${simPort}   pid \\d+\n`));
      assert.ok(out.includes('logs       level info: a line per request'), out);
      assert.ok(out.includes('ring       static members (no Redis)'), out);
      assert.ok(out.includes(`curl -si ${router}/v1/chat/completions`), out);
      assert.ok(out.includes(`curl -si ${router}/v1/messages`), out);
      assert.ok(out.includes("-H 'Authorization: Bearer qr-demo-alice'"), out);
      // Every child's lines carry its name, padded to the longest ('simulator').
      for (const name of ['simulator', 'node-1   ', 'node-2   ', 'router-1 ']) assert.ok(`\n${out}`.includes(`\n[${name}] `), `no line of ${name}:\n${out}`);

      const openai = new OpenAI({ baseURL: `${router}/v1`, apiKey: 'qr-demo-alice', maxRetries: 0 });
      const chat = await openai.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 7, messages: [{ role: 'user', content: 'Hello' }] }).withResponse();
      assert.equal(chat.response.status, 200);
      assert.equal(chat.data.usage?.completion_tokens, 7);
      // alice's limits from demo.yaml, set by the owning node behind the router.
      assert.equal(chat.response.headers.get('x-ratelimit-limit-requests'), '60');
      assert.equal(chat.response.headers.get('x-ratelimit-limit-tokens'), '20000');

      const anthropic = new Anthropic({ baseURL: router, apiKey: 'qr-demo-alice', maxRetries: 0 });
      const message = await anthropic.messages.create({ model: 'claude-sonnet-5', max_tokens: 5, messages: [{ role: 'user', content: 'Hello' }] });
      assert.equal(message.usage.output_tokens, 5);
      // --logs: the owner and the router each wrote a line per request.
      for (let i = 0; i < 50 && (up.out().match(/"msg":"request"/g) ?? []).length < 4; i++) await new Promise((r) => setTimeout(r, 50));
      assert.equal((up.out().match(/\[router-1 \] \{[^\n]*"msg":"request"/g) ?? []).length, 2, up.out());
      assert.equal((up.out().match(/\[node-\d {3}\] \{[^\n]*"msg":"request"/g) ?? []).length, 2, up.out());

      // The cluster secret: none was set, so up generated one and handed it to every node and
      // router in their environment, never on a command line; a call to a node's internal route
      // without it is refused.
      if (process.platform === 'linux') {
        const pids = ['node-1', 'node-2', 'router-1'].map((name) => pidOf(out, name));
        const secrets = pids.map((pid) => readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').find((e) => e.startsWith('QUOTARING_CLUSTER_SECRET='))?.slice('QUOTARING_CLUSTER_SECRET='.length));
        assert.equal(new Set(secrets).size, 1, 'one secret for the whole cluster');
        const secret = secrets[0] ?? '';
        assert.ok(secret.length >= 32, 'a generated secret of at least 32 characters');
        for (const pid of [proc.pid ?? 0, ...pids]) assert.equal(readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(secret), false, `the secret on the command line of ${pid}`);
      }
      const unsigned = await fetch(`http://127.0.0.1:${nodePort}/_quotaring/v1/levels`);
      assert.equal(unsigned.status, 401);
      assert.equal(unsigned.headers.get('x-quotaring-error'), 'cluster_auth_failed');

      proc.kill('SIGINT');
      const [code, signal] = await exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null });
      assert.match(up.out(), /\nstopping\.\.\. \(again to stop at once\)\n/);
      for (const port of [routerPort, nodePort, nodePort + 1, simPort, adminPort, adminPort + 1, adminPort + 2]) assert.equal(await listening(port), false, `port ${port} still open`);
    } finally {
      await up.kill();
    }
  });

  test('a node that leaves (SIGTERM, exit 0) while another runs: up keeps serving through the router; Ctrl-C then exits 0', { timeout: 20_000 }, async () => {
    const up = await startUp(2);
    const { proc, routerPort, nodePort, simPort, exited } = up;
    try {
      process.kill(pidOf(up.out(), 'node-1'), 'SIGTERM');
      for (let i = 0; i < 100 && !up.out().includes('[node-1   ] left (0); 1 node remains'); i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok(up.out().includes('[node-1   ] left (0); 1 node remains'), up.out());
      assert.equal(await listening(nodePort), false);
      // Static members: the router routes node-1's tenants around it to node-2.
      for (const key of ['qr-demo-bob', 'qr-demo-alice']) {
        const reply = await new OpenAI({ baseURL: `http://127.0.0.1:${routerPort}/v1`, apiKey: key, maxRetries: 0 }).chat.completions.create({
          model: 'gpt-4o-mini',
          max_tokens: 5,
          messages: [{ role: 'user', content: 'Hello' }],
        });
        assert.equal(reply.usage?.completion_tokens, 5);
      }
      proc.kill('SIGINT');
      const [code, signal] = await exited;
      assert.deepEqual({ code, signal }, { code: 0, signal: null });
      for (const port of [routerPort, nodePort + 1, simPort]) assert.equal(await listening(port), false, `port ${port} still open`);
    } finally {
      await up.kill();
    }
  });

  test('the last node dying stops the others: exit code 1, every port closed', { timeout: 15_000 }, async () => {
    const up = await startUp(1);
    const { routerPort, nodePort, simPort, exited } = up;
    try {
      process.kill(pidOf(up.out(), 'node-1'), 'SIGKILL');
      const [code, signal] = await exited;
      assert.deepEqual({ code, signal }, { code: 1, signal: null });
      assert.ok(up.out().includes('[node-1   ] exited unexpectedly (SIGKILL); stopping the others'), up.out());
      for (const port of [routerPort, nodePort, simPort]) assert.equal(await listening(port), false, `port ${port} still open`);
    } finally {
      await up.kill();
    }
  });

  test('quiet by default: no request lines, the banner stays the last thing printed; the banner names each process\'s pid', { timeout: 20_000 }, async () => {
    const up = await startUp(1);
    try {
      assert.ok(up.out().includes('logs       level warn: no request lines (--logs for one per request)'), up.out());
      const before = up.out().length;
      for (let i = 0; i < 3; i++) {
        const reply = await new OpenAI({ baseURL: `http://127.0.0.1:${up.routerPort}/v1`, apiKey: 'qr-demo-bob', maxRetries: 0 }).chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: [{ role: 'user', content: 'Hello' }] });
        assert.equal(reply.usage?.completion_tokens, 3);
      }
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(up.out().slice(before), '', 'nothing printed after the banner');
      assert.ok(readFileSync(`/proc/${pidOf(up.out(), 'node-1')}/cmdline`, 'utf8').includes('\0node\0'));
      assert.ok(readFileSync(`/proc/${pidOf(up.out(), 'router-1')}/cmdline`, 'utf8').includes('\0router\0'));
    } finally {
      await up.kill();
    }
  });

  test('--config with real providers (Gemini, vLLM): no simulator started, the banner says so and names each key variable', { timeout: 20_000 }, async () => {
    const ports = await upPorts(1);
    const dir = mkdtempSync(join(tmpdir(), 'qr-up-real-'));
    const file = join(dir, 'real.yaml');
    writeFileSync(
      file,
      [
        'tenants: [{ id: a, keys: [key-a-0000000], limits: [{ requests: 10, window: 1m }] }]',
        'models: [{ name: gemini-flash, encoding: o200k_base, deployments: [gemini, vllm] }]',
        'deployments:',
        '  - { name: gemini, provider: gemini, base_url: "https://generativelanguage.googleapis.com/v1beta/openai", api_key_env: GEMINI_API_KEY, upstream_model: gemini-2.0-flash }',
        '  - { name: vllm, provider: vllm, base_url: "http://127.0.0.1:1" }',
        '',
      ].join('\n'),
    );
    const up = await startUp(1, ['--config', file], ports, { GEMINI_API_KEY: 'not-a-real-key' });
    try {
      assert.ok(up.out().includes('your providers (no simulator started'), up.out());
      assert.ok(!up.out().includes('no provider key needed'), up.out());
      assert.ok(!up.out().includes('  simulator  '), up.out());
      assert.ok(up.out().includes('gemini  https://generativelanguage.googleapis.com/v1beta/openai  (key from GEMINI_API_KEY)'), up.out());
      assert.equal(await listening(up.simPort), false, 'nothing listens on the simulator port');
      assert.ok(!up.out().includes('[simulator'), up.out());
    } finally {
      await up.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('reload: edit the file given to up, run `quotaring reload`: every router and node reloads from it; a bad edit changes nothing', { timeout: 30_000 }, async () => {
    const ports = await upPorts(2);
    const dir = mkdtempSync(join(tmpdir(), 'qr-up-reload-'));
    const file = join(dir, 'my.yaml');
    const demo = readFileSync(new URL('../../cluster/demo.yaml', import.meta.url), 'utf8').replaceAll('http://127.0.0.1:9090', `http://127.0.0.1:${ports.simPort}`);
    writeFileSync(file, demo);
    const up = await startUp(2, ['--config', file], ports);
    try {
      assert.ok(up.out().includes(`config     ${file}   edit it, then: npx quotaring reload --port ${up.routerPort}`), up.out());
      assert.match(up.out(), /provider simulator \(your deployments point at it\)/);
      const alice = new OpenAI({ baseURL: `http://127.0.0.1:${up.routerPort}/v1`, apiKey: 'qr-demo-alice', maxRetries: 0 });
      const ask = async (): Promise<string | null> => (await alice.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 3, messages: [{ role: 'user', content: 'Hi' }] }).withResponse()).response.headers.get('x-ratelimit-limit-requests');
      assert.equal(await ask(), '60');

      writeFileSync(file, demo.replace('{ requests: 60, window: 1m }', '{ requests: 7, window: 1m }'));
      const sent = await runToExit(['reload', '--port', String(up.routerPort)]);
      assert.equal(sent.code, 0, sent.stderr);
      for (let i = 0; i < 100 && (up.out().match(/reload: \S+ ok/g) ?? []).length < 3; i++) await new Promise((r) => setTimeout(r, 50));
      for (const name of ['router-1', 'node-1', 'node-2']) assert.ok(up.out().includes(`reload: ${name} ok\n`), up.out());
      assert.equal(await ask(), '7');

      writeFileSync(file, demo.replace('{ requests: 60, window: 1m }', '{ requests: -1, window: 1m }'));
      up.proc.kill('SIGUSR2');
      for (let i = 0; i < 100 && !up.out().includes('nothing was reloaded'); i++) await new Promise((r) => setTimeout(r, 50));
      assert.match(up.out(), /reload: invalid config:[^]*requests[^]*\n {2}nothing was reloaded; the running config stays\n/);
      assert.equal(await ask(), '7');
    } finally {
      await up.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('no child left behind, start-up included', () => {
    test('SIGINT while the nodes start: up stops every child it started and exits 0', { timeout: 30_000 }, async () => {
      const { routerPort, simPort, nodePort, adminPort, args } = await upPorts(3);
      const proc = spawn(process.execPath, [CLI, 'up', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = once(proc, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
      // The simulator's first line: the nodes are starting now, the routers not yet.
      await new Promise<void>((resolve) => proc.stdout.on('data', (d: Buffer) => ((out += d.toString()), out.includes('provider simulator listening') && resolve())));
      proc.kill('SIGINT');
      const [code] = await exited;
      assert.equal(code, 0, out);
      assert.match(out, /stopped during start-up; every process started was stopped\n/);
      assert.doesNotMatch(out, new RegExp(BANNER_HEADLINE));
      assert.deepEqual(await closedWithin([simPort, nodePort, nodePort + 1, nodePort + 2, routerPort, adminPort], 2_000), []);
    });

    test('npm start stopped by SIGTERM to npm during start-up: up gets it, nothing keeps running', { timeout: 30_000 }, async () => {
      const { routerPort, simPort, nodePort, args } = await upPorts(3);
      const root = fileURLToPath(new URL('../..', import.meta.url));
      const npm = spawn('npm', ['start', '--silent', '--', ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      npm.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = once(npm, 'exit');
      await new Promise<void>((resolve) => npm.stdout.on('data', (d: Buffer) => ((out += d.toString()), out.includes('provider simulator listening') && resolve())));
      npm.kill('SIGTERM');
      await exited;
      assert.deepEqual(await closedWithin([simPort, nodePort, nodePort + 1, nodePort + 2, routerPort], 10_000), [], out);
    });

    test('the terminal closes (SIGHUP to up\'s whole process group) after the banner: up stops every child and exits 0', { timeout: 30_000 }, async () => {
      const { routerPort, simPort, nodePort, adminPort, args } = await upPorts(2);
      // Its own process group, as a shell job is: the hangup reaches up and its children at once.
      const proc = spawn(process.execPath, [CLI, 'up', ...args], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      let out = '';
      proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = once(proc, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
      await new Promise<void>((resolve) => proc.stdout.on('data', (d: Buffer) => ((out += d.toString()), out.includes('Press Ctrl-C') && resolve())));
      const pids = ['node-1', 'node-2', 'router-1', 'simulator'].map((n) => pidOf(out, n));
      process.kill(-(proc.pid as number), 'SIGHUP');
      const [code, signal] = await exited;
      assert.deepEqual([code, signal], [0, null], out);
      assert.doesNotMatch(out, /reload:/);
      assert.deepEqual(await closedWithin([simPort, nodePort, nodePort + 1, routerPort, adminPort], 5_000), [], out);
      for (let i = 0; i < 50 && pids.some((pid) => existsSync(`/proc/${pid}`)); i++) await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(pids.filter((pid) => existsSync(`/proc/${pid}`)), []);
    });

    test('up SIGKILLed after its banner: every child notices its pipe closing and stops', { timeout: 30_000 }, async () => {
      const up = await startUp(2);
      const pids = ['node-1', 'node-2', 'router-1', 'simulator'].map((n) => pidOf(up.out(), n));
      up.proc.kill('SIGKILL');
      await up.exited;
      assert.deepEqual(await closedWithin([up.routerPort, up.nodePort, up.nodePort + 1, up.simPort], 10_000), [], up.out());
      for (let i = 0; i < 100 && pids.some((pid) => existsSync(`/proc/${pid}`)); i++) await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(pids.filter((pid) => existsSync(`/proc/${pid}`)), []);
    });
  });

  describe('argument checks: a clear error and exit code 1 before anything starts', () => {
    const cases: [string[], string][] = [
      [['--nodes', '0'], '--nodes must be an integer from 1 to 16 (got 0)'],
      [['--nodes', '17'], '--nodes must be an integer from 1 to 16 (got 17)'],
      [['--routers', '9'], '--routers must be an integer from 1 to 8 (got 9)'],
      [['--redis', 'http://127.0.0.1:6379'], '--redis must be a redis:// or rediss:// URL such as redis://127.0.0.1:6379 (got "http://127.0.0.1:6379")'],
      [
        ['--redis', 'redis://:hunter22@127.0.0.1:6379'],
        '--redis: the URL carries a password, and a command line is readable by every user of this machine (ps); put the URL in an environment variable and pass its name: --redis-env NAME (got "redis://:***@127.0.0.1:6379")',
      ],
      [['--redis-env', 'QUOTARING_TEST_UNSET_REDIS_URL'], '--redis-env: environment variable QUOTARING_TEST_UNSET_REDIS_URL is not set'],
      [
        ['--port', '8100', '--routers', '2', '--node-port', '8101'],
        '--port 8100 (ports 8100-8101 for the 2 routers) overlaps --node-port 8101 (ports 8101-8103 for the 3 nodes); choose ports that do not collide',
      ],
      [['--node-port', '65534'], '--node-port must leave 3 ports within 1..65535 for the 3 nodes (got 65534)'],
    ];
    for (const [args, message] of cases) {
      test(args.join(' '), async () => {
        const res = await runToExit(['up', ...args]);
        assert.deepEqual({ code: res.code, stderr: res.stderr, stdout: res.stdout }, { code: 1, stderr: `error: ${message}\n`, stdout: '' });
      });
    }

    test('a config file that does not load: exit code 2 naming the file', async () => {
      const res = await runToExit(['up', '--config', '/nonexistent/quotaring.yaml']);
      assert.equal(res.code, 2);
      assert.match(res.stderr, /\/nonexistent\/quotaring\.yaml/);
      assert.equal(res.stdout, '');
    });

    test('a non-integer count is refused by the parser', async () => {
      const res = await runToExit(['up', '--nodes', 'three']);
      assert.equal(res.code, 1);
      assert.match(res.stderr, /option '-n, --nodes <n>' argument 'three' is invalid\. must be a non-negative integer/);
    });
  });
});

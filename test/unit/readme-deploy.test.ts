/**
 * The README's "Deploy on Kubernetes" commands, run where they can run here (issue 18): there is no
 * Docker engine and no Helm binary, so the `docker build` line is checked for its Dockerfile and
 * context, and the `helm install` line is rendered with the chart renderer of the chart test
 * (`test/helpers/helm-render.ts`) with exactly the `--set` values it gives: the chart path exists,
 * every `--set` key is a documented value, and the render succeeds with a Deployment, a StatefulSet
 * and the Secrets the command fills.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { renderChart, renderedObjects } from '../helpers/helm-render.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(resolve(ROOT, 'README.md'), 'utf8');

/** The shell block of the README's "Deploy on Kubernetes" section, with line continuations joined. */
function deployCommands(): string[] {
  const at = README.indexOf('### Deploy on Kubernetes');
  assert.ok(at >= 0, 'README has a "Deploy on Kubernetes" section');
  const block = /```sh\n([\s\S]*?)```/.exec(README.slice(at));
  assert.ok(block !== null, 'the section has a sh block');
  return (block[1] as string).replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '');
}

/** `a.b.c=v` → { a: { b: { c: v } } }, merged into `into`. */
function setPath(into: Record<string, unknown>, path: string, value: string): void {
  const keys = path.split('.');
  let node = into;
  for (const k of keys.slice(0, -1)) node = (node[k] ??= {}) as Record<string, unknown>;
  node[keys[keys.length - 1] as string] = value;
}

/** The shell block of the README's "Podman" section, with line continuations joined. */
function podmanCommands(): string[] {
  const at = README.indexOf('### Podman');
  assert.ok(at >= 0, 'README has a "Podman" section');
  const block = /```sh\n([\s\S]*?)```/.exec(README.slice(at));
  assert.ok(block !== null, 'the section has a sh block');
  return (block[1] as string).replace(/\\\n\s*/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'));
}

describe('README Podman commands are the ones the image test runs', () => {
  const script = readFileSync(resolve(ROOT, 'scripts/podman-image.sh'), 'utf8');
  const imageTest = readFileSync(resolve(ROOT, 'test/e2e/image.test.ts'), 'utf8');
  test('podman build: the flags and mounts of scripts/podman-image.sh', () => {
    const build = podmanCommands().find((c) => c.startsWith('podman build'));
    assert.ok(build !== undefined, 'a podman build line');
    for (const flag of ['--format docker', '--network host', '--build-arg NODE_IMAGE=', ':/etc/ssl/certs/ca-certificates.crt:ro', ':/usr/local/etc/npmrc:ro']) {
      assert.ok(build.includes(flag), `README: ${flag}`);
      assert.ok(script.includes(flag.replace('--build-arg NODE_IMAGE=', '--build-arg NODE_IMAGE="')), `podman-image.sh: ${flag}`);
    }
    assert.match(build, / \.$/, 'builds the repository root');
    assert.ok(podmanCommands().some((c) => c.startsWith('sh scripts/podman-image.sh image')), 'the script first');
  });
  test('podman run: read-only root, a tmpfs state directory, the health port, as in the image test', () => {
    const run = podmanCommands().find((c) => c.startsWith('podman run'));
    assert.ok(run !== undefined, 'a podman run line');
    for (const flag of ['--network host', '--read-only', '--read-only-tmpfs=false', '/var/lib/quotaring:rw,mode=0755,U', 'QUOTARING_HEALTH_PORT', '--health-interval disable', '--stop-timeout']) {
      assert.ok(run.includes(flag), `README: ${flag}`);
      assert.ok(imageTest.includes(flag.split(' ')[0] as string), `image test: ${flag}`);
    }
  });
});

describe('README Deploy commands', () => {
  test('docker build: the Dockerfile and the build context it names exist', () => {
    const build = deployCommands().find((c) => c.startsWith('docker build'));
    assert.ok(build !== undefined, 'a docker build line');
    assert.match(build, / \.( |$|&)/, 'builds the repository root');
    assert.equal(existsSync(resolve(ROOT, 'Dockerfile')), true);
  });

  test('helm install: renders with the --set values it gives, each a documented value of the chart', () => {
    const install = deployCommands().find((c) => c.startsWith('helm install'));
    assert.ok(install !== undefined, 'a helm install line');
    const words = install.match(/"[^"]*"|'[^']*'|\S+/g) ?? [];
    const [, , release, chart] = words;
    assert.equal(existsSync(resolve(ROOT, chart as string, 'Chart.yaml')), true, `${chart} is a chart`);
    const values = parse(readFileSync(resolve(ROOT, chart as string, 'values.yaml'), 'utf8')) as Record<string, unknown>;
    const overrides: Record<string, unknown> = {};
    for (let i = 0; i < words.length; i++) {
      if (words[i] !== '--set') continue;
      const [key, raw] = (words[i + 1] as string).split(/=(.*)/s) as [string, string];
      // What the shell would substitute: `$(openssl rand -base64 32)` is 44 characters, `-hex 16` 32.
      const value = raw.includes('-base64 32') ? 'c'.repeat(44) : raw.includes('-hex 16') ? 'a'.repeat(32) : raw;
      let node: unknown = values;
      for (const k of key.split('.')) node = (node as Record<string, unknown> | undefined)?.[k];
      assert.notEqual(node, undefined, `--set ${key}: not a value of the chart`);
      setPath(overrides, key, value);
    }
    const objects = renderedObjects(renderChart(resolve(ROOT, chart as string), overrides, { Name: release as string, Namespace: 'default' })).map((o) => o.object);
    const kinds = new Set(objects.map((o) => o['kind']));
    for (const kind of ['Deployment', 'StatefulSet', 'Secret', 'ConfigMap', 'Service']) assert.equal(kinds.has(kind), true, `renders a ${kind}`);
    const images = JSON.stringify(objects).match(/registry\.example\/quotaring[^"]*/g) ?? [];
    assert.ok(images.length >= 2, 'routers and nodes run the image the command names');
  });
});

/**
 * The configuration reference keeps up with the schema: the table of every key in
 * `docs/configuration.md` is what `npm run docs:config` generates from `src/config/schema.ts`, and
 * every key's name appears in the hand-written part above it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { configKeys, REFERENCE_BEGIN, withConfigKeys } from '../../src/config/reference.ts';

const DOC = new URL('../../docs/configuration.md', import.meta.url);

test('docs/configuration.md holds the current table of config keys (else: npm run docs:config)', () => {
  const doc = readFileSync(DOC, 'utf8');
  assert.equal(doc, withConfigKeys(doc), 'the table of keys differs from the schema: run npm run docs:config');
});

test('every config key is described in the hand-written part of docs/configuration.md', () => {
  const doc = readFileSync(DOC, 'utf8');
  const prose = doc.slice(0, doc.indexOf(REFERENCE_BEGIN));
  const names = new Set(configKeys().map((k) => (k.path.split('.').at(-1) as string).replace('[]', '')));
  const missing = [...names].filter((name) => !new RegExp(`\\b${name}\\b`).test(prose));
  assert.deepEqual(missing, [], 'keys in the schema that docs/configuration.md does not describe');
});

test('the table knows durations, sizes, enums, defaults, optional keys and list items', () => {
  const byPath = new Map(configKeys().map((k) => [k.path, k]));
  assert.deepEqual(byPath.get('server.body_limit'), { path: 'server.body_limit', type: 'bytes', default: '4194304 bytes' });
  assert.deepEqual(byPath.get('cluster.dead_after'), { path: 'cluster.dead_after', type: 'duration', default: '3000 ms' });
  assert.deepEqual(byPath.get('server.count_tokens'), { path: 'server.count_tokens', type: 'free | request', default: '"free"' });
  assert.deepEqual(byPath.get('tenants[].limits[].window'), { path: 'tenants[].limits[].window', type: 'duration', default: 'optional' });
  assert.deepEqual(byPath.get('deployments[].connections'), { path: 'deployments[].connections', type: 'integer', default: 'optional' });
});

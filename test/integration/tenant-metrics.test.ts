/**
 * `quotaring_tenant_remaining` comes from the tenant's owner only (issue 19): a node standing in for
 * a suspect owner (a router-signed request with `x-quotaring-fallback-for`) decides for the tenant
 * but does not export its levels, so a dashboard never plots a stand-in's partial view beside the
 * owner's. node-a runs for real (static cluster of node-a and node-b; node-b is not started).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { buildConfig } from '../../src/config/load.ts';
import { createRing } from '../../src/coord/ring/ring.ts';
import { StaticMembership } from '../../src/coord/membership/static-membership.ts';
import type { Member } from '../../src/coord/types.ts';
import { buildGateway, nodeHandoff } from '../../src/gateway/server.ts';
import { randomId } from '../../src/security/random-id.ts';
import { SIGNATURE_HEADER } from '../../src/security/request-signature.ts';
import { startSimulator } from '../../src/simulator/server.ts';
import { TEST_SECRET, testSigner } from '../helpers/cluster-secret.ts';
import { freePort } from '../helpers/processes.ts';

const VNODES = 160;
const chat = JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 5, messages: [{ role: 'user', content: 'Hi' }] });

/** Names of the tenants with a `quotaring_tenant_remaining` series in Prometheus text. */
function exported(text: string): string[] {
  const tenants = new Set<string>();
  for (const m of text.matchAll(/^quotaring_tenant_remaining\{tenant="([^"]+)"/gm)) tenants.add(m[1] as string);
  return [...tenants].sort();
}

describe('quotaring_tenant_remaining: from the owner only', () => {
  let sim: Awaited<ReturnType<typeof startSimulator>>;
  let app: FastifyInstance;
  let url: string;
  let own = '';
  let theirs = '';

  before(async () => {
    sim = await startSimulator({ port: 0 });
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    const a: Member = { id: 'node-a', url };
    const b: Member = { id: 'node-b', url: `http://127.0.0.1:${await freePort()}` };
    const ring = createRing([a, b], { vnodes: VNODES });
    const candidates = Array.from({ length: 200 }, (_, i) => `tenant-${i}`);
    own = candidates.find((t) => ring.owner(t)?.id === 'node-a') ?? '';
    theirs = candidates.find((t) => ring.owner(t)?.id === 'node-b') ?? '';
    const config = buildConfig(
      {
        server: { log_level: 'silent', state_dir: '' },
        cluster: { members: [a, b], vnodes: VNODES },
        tenants: [
          { id: own, keys: ['key-own-000001'], metrics: true, limits: [{ requests: 60, window: '1m' }] },
          { id: theirs, keys: ['key-theirs-0001'], metrics: true, limits: [{ requests: 60, window: '1m' }] },
        ],
        models: [{ name: 'gpt-4o-mini', encoding: 'o200k_base', deployments: ['sim'] }],
        deployments: [{ name: 'sim', provider: 'openai', base_url: sim.url, api_key_env: 'K' }],
      },
      'tenant-metrics.yaml',
      { K: 'provider-key-0' },
    );
    const membership = new StaticMembership([a, b], { vnodes: VNODES });
    app = buildGateway({ config, logger: false, clusterSecret: TEST_SECRET, cluster: { self: a, membership, ringOptions: { vnodes: VNODES } } });
    await app.listen({ host: '127.0.0.1', port });
    const handoff = nodeHandoff(app);
    await handoff?.start();
    await membership.start();
    handoff?.joined();
  });
  after(async () => {
    await app.close();
    await sim.close();
  });

  test('a stand-in decides for the owner\'s tenant but exports only the tenants it owns', async () => {
    const path = '/v1/chat/completions';
    // The router's fallback request for node-b's tenant: node-a stands in and admits it.
    const headers: Record<string, string> = { authorization: 'Bearer key-theirs-0001', 'content-type': 'application/json', 'x-quotaring-fallback-for': 'node-b', 'x-quotaring-tenant': theirs };
    headers[SIGNATURE_HEADER] = testSigner.signature({ method: 'POST', path, headers }, randomId());
    const standIn = await request(`${url}${path}`, { method: 'POST', headers, body: chat });
    assert.equal(standIn.statusCode, 200, await standIn.body.text());
    const mine = await request(`${url}${path}`, { method: 'POST', headers: { authorization: 'Bearer key-own-000001', 'content-type': 'application/json' }, body: chat });
    assert.equal(mine.statusCode, 200, await mine.body.text());

    const view = await (await request(`${url}/metrics`)).body.text();
    assert.deepEqual(exported(view), [own]);
    assert.match(view, new RegExp(`^quotaring_tenant_remaining\\{tenant="${own}",limit="requests/1m"\\} \\d+$`, 'm'));
  });
});

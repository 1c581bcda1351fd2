/**
 * `bench/compare/reference-limiter.ts`, the rate-limiter-flexible reference of the sharded-vs-central
 * benchmark, as a real child process between a real redis-server and the bundled simulator.
 *
 * The numbers: every body is one user message "hello", whose prompt counts P tokens (o200k_base,
 * `countOpenAIChat`, as the reference counts it); a reservation is P + max_tokens, and the
 * simulator's usage is P + x-sim-output-tokens (capped by max_tokens), so every counter value is
 * known exactly. Windows are 60 s fixed windows that start at a key's first consume: the test runs
 * well inside one.
 * - requests: 5 a minute → 5 × 200, then 429 `requests`; the refused point is rewarded back, so the
 *   Redis counter stays at 5.
 * - tokens: 1,000 a minute. A (reserve 600, use P+100) leaves P+100 counted after its refund; a
 *   reservation of 1,000 − (P+100) + 1 is refused and one of exactly 1,000 − (P+100) is admitted,
 *   which fits only because A's 500 − P unused tokens were given back (without the refund 600 were
 *   counted). The same exact boundary is checked again after the second settlement.
 * - a tokens refusal gives the request point back: a tenant with 3 requests a minute refused on
 *   tokens first still gets 3 × 200.
 * - unknown or missing key: 401 and no Redis key; bad JSON: 400 and no counter moves. Refused
 *   requests never reach the simulator, and it sees only the upstream key.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Redis } from 'ioredis';
import { request } from 'undici';
import { startSimulator } from '../../src/simulator/server.ts';
import { countOpenAIChat, exactCounter } from '../../src/tokens/index.ts';
import { freePort, simStats } from '../helpers/processes.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

const REFERENCE = fileURLToPath(new URL('../../bench/compare/reference-limiter.ts', import.meta.url));
const UPSTREAM_KEY = 'sim-ref-key';
const messages = [{ role: 'user', content: 'hello' }];
/** Prompt tokens of every body here. */
const P = countOpenAIChat({ messages }, exactCounter('o200k_base'));
const TPM = 1_000;

interface Reply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Record<string, unknown>;
}

describe('reference limiter (rate-limiter-flexible RateLimiterRedis)', () => {
  let redis: RunningRedis;
  let client: Redis;
  let sim: { url: string; close(): Promise<void> };
  let proc: ChildProcess;
  let base: string;
  let output = '';

  before(async () => {
    redis = await startRedis();
    client = redis.client();
    sim = await startSimulator({ port: 0 });
    const dir = mkdtempSync(join(tmpdir(), 'quotaring-ref-'));
    const tenantsFile = join(dir, 'tenants.json');
    writeFileSync(
      tenantsFile,
      JSON.stringify({
        upstreamKey: UPSTREAM_KEY,
        tenants: [
          { id: 'rpm', key: 'k-rpm', requestsPerMinute: 5 },
          { id: 'tpm', key: 'k-tpm', tokensPerMinute: TPM },
          { id: 'both', key: 'k-both', requestsPerMinute: 3, tokensPerMinute: TPM },
        ],
      }),
    );
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    proc = spawn(process.execPath, ['--import', 'tsx', REFERENCE, '--port', String(port), '--redis', redis.url, '--upstream', sim.url, '--tenants', tenantsFile], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    proc.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`reference exited with ${proc.exitCode}:\n${output}`);
      if (Date.now() > deadline) throw new Error(`reference did not answer /healthz:\n${output}`);
      try {
        const res = await request(`${base}/healthz`);
        await res.body.dump();
        if (res.statusCode === 200) break;
      } catch {
        // not up yet
      }
      await sleep(50);
    }
  });

  after(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await sim.close();
    await redis.stop();
  });

  /** POSTs a chat with max_tokens = reservation − P (so it reserves exactly `reservation`). */
  async function chat(key: string | undefined, reservation: number, outputTokens = 0, raw?: string): Promise<Reply> {
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-sim-output-tokens': String(outputTokens) };
    if (key !== undefined) headers['authorization'] = `Bearer ${key}`;
    const res = await request(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body: raw ?? JSON.stringify({ model: 'gpt-4o-mini', max_tokens: reservation - P, messages }),
    });
    return { status: res.statusCode, headers: res.headers, body: (await res.body.json()) as Record<string, unknown> };
  }

  const counter = async (key: string): Promise<number | null> => {
    const v = await client.get(key);
    return v === null ? null : Number(v);
  };

  function assertRefused(r: Reply, type: 'requests' | 'tokens'): void {
    assert.equal(r.status, 429);
    assert.deepEqual(Object.keys(r.body), ['error']);
    const error = r.body['error'] as Record<string, unknown>;
    assert.equal(error['type'], type);
    assert.equal(error['code'], 'rate_limit_exceeded');
    assert.equal(error['param'], null);
    assert.equal(typeof error['message'], 'string');
    const ms = Number(r.headers['retry-after-ms']);
    assert.ok(ms > 0 && ms <= 60_000, `retry-after-ms ${ms} within the 60 s window`);
    assert.equal(Number(r.headers['retry-after']), Math.ceil(ms / 1000));
    assert.ok(Number(r.headers['retry-after']) >= 1);
  }

  test('requests: 5 a minute → 5 × 200, then 429 requests; the refused point is given back', async () => {
    const statuses: number[] = [];
    const remaining: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await chat('k-rpm', P + 10, 1);
      statuses.push(r.status);
      remaining.push(String(r.headers['x-ratelimit-remaining-requests']));
      assert.equal(r.headers['x-ratelimit-limit-requests'], '5');
      assert.equal(r.headers['x-ratelimit-limit-tokens'], undefined, 'no tokens limit, no header');
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200]);
    assert.deepEqual(remaining, ['4', '3', '2', '1', '0']);
    const refused = await chat('k-rpm', P + 10, 1);
    assertRefused(refused, 'requests');
    assert.equal(refused.headers['x-ratelimit-limit-requests'], '5');
    assert.equal(await counter('ref-rpm:rpm'), 5);
    const ttl = await client.pttl('ref-rpm:rpm');
    assert.ok(ttl > 0 && ttl <= 60_000, `a 60 s fixed window (pttl ${ttl})`);
  });

  test(`tokens: ${TPM} a minute, refused exactly past the limit; an unused reservation is refunded`, async () => {
    // A: reserve 600, use P + 100.
    const a = await chat('k-tpm', 600, 100);
    assert.equal(a.status, 200);
    assert.equal(a.headers['x-ratelimit-limit-tokens'], String(TPM));
    assert.equal(a.headers['x-ratelimit-remaining-tokens'], String(TPM - 600), 'remaining right after the reservation');
    assert.equal((a.body['usage'] as Record<string, unknown>)['total_tokens'], P + 100);
    assert.equal(await counter('ref-tpm:tpm'), P + 100, 'settled on usage: 500 − P given back');

    let room = TPM - (P + 100);
    assertRefused(await chat('k-tpm', room + 1, 0), 'tokens');
    assert.equal(await counter('ref-tpm:tpm'), P + 100, 'a refusal leaves the counter where it was');

    // Fits only thanks to A's refund: 600 + room > TPM.
    assert.ok(600 + room > TPM);
    const c = await chat('k-tpm', room, 50);
    assert.equal(c.status, 200);
    assert.equal(c.headers['x-ratelimit-remaining-tokens'], '0');
    assert.equal(await counter('ref-tpm:tpm'), 2 * P + 150);

    room = TPM - (2 * P + 150);
    assertRefused(await chat('k-tpm', room + 1, 0), 'tokens');
    const d = await chat('k-tpm', room, room - P);
    assert.equal(d.status, 200, 'a reservation of exactly the room left fits');
    assert.equal(await counter('ref-tpm:tpm'), TPM, 'usage equal to the reservation: no settlement');
    assertRefused(await chat('k-tpm', P, 0), 'tokens');
  });

  test('a tokens refusal gives the request point back', async () => {
    assertRefused(await chat('k-both', TPM + 1, 0), 'tokens');
    assert.equal(await counter('ref-rpm:both'), 0);
    assert.equal(await counter('ref-tpm:both'), 0);
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await chat('k-both', P + 10, 10)).status);
    assert.deepEqual(statuses, [200, 200, 200, 429]);
    assert.equal(await counter('ref-rpm:both'), 3);
    assert.equal(await counter('ref-tpm:both'), 3 * (P + 10));
  });

  test('unknown or missing key: 401 invalid_api_key, nothing written to Redis; bad JSON: 400, no counter moves', async () => {
    const before = (await client.keys('*')).sort();
    for (const key of ['k-nobody', undefined]) {
      const r = await chat(key, P + 10, 1);
      assert.equal(r.status, 401);
      const { message, ...rest } = r.body['error'] as Record<string, unknown>;
      assert.equal(typeof message, 'string');
      assert.deepEqual(rest, { type: 'invalid_request_error', param: null, code: 'invalid_api_key' });
      assert.equal(r.headers['x-ratelimit-limit-requests'], undefined, 'no tenant, no limits');
    }
    assert.deepEqual((await client.keys('*')).sort(), before);
    assert.ok(!before.some((k) => k.includes('nobody')));

    const bad = await chat('k-both', 0, 0, '{not json');
    assert.equal(bad.status, 400);
    assert.equal((bad.body['error'] as Record<string, unknown>)['code'], 'invalid_json');
    assert.equal((bad.body['error'] as Record<string, unknown>)['type'], 'invalid_request_error');
    assert.equal(await counter('ref-rpm:both'), 3);
    assert.equal(await counter('ref-tpm:both'), 3 * (P + 10));
    assert.deepEqual((await client.keys('*')).sort(), before);
  });

  test('only admitted requests reach the simulator, with the upstream key', async () => {
    const stats = await simStats(sim.url);
    // rpm 5, tpm 3 (A, C, D), both 3.
    assert.deepEqual(Object.keys(stats.byKey), [UPSTREAM_KEY]);
    assert.equal(stats.byKey[UPSTREAM_KEY]?.requests, 11);
    assert.equal(stats.completed, 11);
  });

  test('SIGTERM: exits 0', async () => {
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.kill('SIGTERM');
    assert.equal(await exited, 0, output);
  });
});

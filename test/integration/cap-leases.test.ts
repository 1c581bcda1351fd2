/**
 * CapLeases on a real redis-server: three nodes (three instances, each with its own
 * connection) share one deployment's token quota; admitted tokens stay within the cluster bucket
 * and close to it, with few Redis calls per take (INFO commandstats). Close gives back the unspent
 * balance.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { setImmediate as yieldLoop, setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { CapLeases } from '../../src/globalcap/cap-leases.ts';
import { capKey } from '../../src/globalcap/keys.ts';
import { defineCapScripts } from '../../src/globalcap/scripts.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

/** Redis TIME in ms (the scripts' clock). */
async function redisNow(c: Redis): Promise<number> {
  const [s, us] = (await c.time()) as unknown as [string, string];
  return Number(s) * 1000 + Number(us) / 1000;
}

/** Script calls (EVALSHA + EVAL) counted by INFO commandstats since the last CONFIG RESETSTAT. */
async function scriptCalls(c: Redis): Promise<number> {
  const text = await c.info('commandstats');
  let calls = 0;
  for (const m of text.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1]);
  return calls;
}

const TPM_KEY = capKey('it', 'deployment:gpt:tpm');

describe('CapLeases on a real Redis', () => {
  let redis: RunningRedis;
  let admin: Redis;

  before(async () => {
    redis = await startRedis();
    admin = redis.client();
  });
  after(async () => {
    await redis.stop();
  });
  beforeEach(async () => {
    await redis.flush();
  });

  test('3 nodes taking as fast as they can for 3 s: admitted within capacity + rate × elapsed and ≥ 85% of it; Redis calls per take ≪ 1', async () => {
    const nodes = [0, 1, 2].map(
      () =>
        new CapLeases({
          cluster: 'it',
          deployments: { gpt: { tpm: 60_000, headroom: 0.9 } },
          scripts: defineCapScripts(redis.client()),
          liveNodes: () => 3,
        }),
    );
    await admin.config('RESETSTAT');
    const takeTokens = 50;
    const runMs = 3000;
    const start = await redisNow(admin);
    const stopAt = Date.now() + runMs;
    let attempts = 0;
    const admitted = [0, 0, 0];
    await Promise.all(
      nodes.map(async (leases, i) => {
        let sinceYield = 0;
        while (Date.now() < stopAt) {
          attempts++;
          const r = leases.take('gpt', { tokens: takeTokens });
          if (r.ok) {
            admitted[i] = (admitted[i] as number) + takeTokens;
            if (++sinceYield >= 20) {
              sinceYield = 0;
              await yieldLoop();
            }
          } else {
            assert.ok(r.waitMs > 0);
            await Promise.race([leases.whenRenewed('gpt').then(() => yieldLoop()), sleep(Math.min(r.waitMs, Math.max(0, stopAt - Date.now())))]);
          }
        }
      }),
    );
    const end = await redisNow(admin);
    const calls = await scriptCalls(admin);
    const total = admitted.reduce((a, b) => a + b, 0);
    const elapsedSec = (end - start) / 1000;
    const bound = 54_000 + 900 * elapsedSec;
    const perTake = calls / attempts;
    console.log(
      `admitted ${total} tokens (${admitted.join(' + ')}) in ${elapsedSec.toFixed(3)} s; bound ${bound.toFixed(0)} ` +
        `(${((100 * total) / bound).toFixed(1)}%); ${attempts} takes, ${calls} script calls (${perTake.toFixed(4)} per take, ` +
        `${(calls / (total / takeTokens)).toFixed(4)} per admitted take)`,
    );
    assert.ok(total <= bound, `${total} > ${bound}`);
    assert.ok(total >= 0.85 * bound, `${total} < 85% of ${bound}`);
    assert.ok(perTake < 0.05, `${perTake} Redis calls per take`);
    for (const leases of nodes) await leases.close();
  });

  test('close gives the unspent balance back to the cluster bucket', async () => {
    const scripts = defineCapScripts(redis.client());
    const leases = new CapLeases({ cluster: 'it', deployments: { gpt: { tpm: 60_000 } }, scripts });
    assert.equal(leases.take('gpt', { tokens: 1000 }).ok, false);
    await leases.whenRenewed('gpt');
    assert.equal(leases.take('gpt', { tokens: 600 }).ok, true);
    await leases.whenRenewed('gpt');
    const before = Number(await admin.hget(TPM_KEY, 'l'));
    const balance = leases.view('gpt').tokens?.balance ?? 0;
    assert.ok(balance > 0);
    const t0 = await redisNow(admin);
    await leases.close();
    const t1 = await redisNow(admin);
    // Level after close = level before + balance + refill (900 tokens/s) since the level's time, capped at 54,000.
    const after = await admin.hgetall(TPM_KEY);
    const level = after['l'] === undefined ? 54_000 : Number(after['l']);
    assert.ok(level >= Math.min(54_000, before + balance), `${level} < ${before} + ${balance}`);
    assert.ok(level <= Math.min(54_000, 54_000 - 600 + (900 * (t1 - t0 + 1000)) / 1000), `${level} too high`);
  });
});

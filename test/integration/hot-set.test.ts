/**
 * HotSet on a real redis-server: a mark reaches another process's view within one poll (500 ms);
 * an entry counts until its `until`, then the readers report it cooled; unreadable entries and
 * entries expired a minute ago are removed; a Redis that goes away keeps the last view.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { HotSet, hotKey } from '../../src/coord/hot/hot-set.ts';
import { startRedis } from '../helpers/redis.ts';
import type { RunningRedis } from '../helpers/redis.ts';

let redis: RunningRedis;
before(async () => {
  redis = await startRedis();
});
after(async () => {
  await redis.stop();
});

test('a mark reaches a reader within one poll, lapses at until, and the reader reports it cooled', async () => {
  const cooled: string[][] = [];
  const writer = new HotSet({ redis: redis.client(), cluster: 'hs' });
  const reader = new HotSet({ redis: redis.client(), cluster: 'hs', pollMs: 100, onChange: (c) => cooled.push([...c]) });
  await writer.start();
  await reader.start();
  try {
    await writer.mark('acme', 3, 600);
    assert.equal(writer.spreadOf('acme'), 3, 'the writer sees its own mark at once');
    await sleep(150);
    assert.equal(reader.spreadOf('acme'), 3);
    assert.deepEqual(reader.hot(), ['acme']);
    await sleep(600);
    assert.equal(reader.spreadOf('acme'), undefined);
    assert.deepEqual(cooled.at(-1), ['acme']);
  } finally {
    writer.stop();
    reader.stop();
  }
});

test('garbage and entries expired over a minute ago are deleted; a failed read keeps the view', async () => {
  const client = redis.client();
  await client.hset(hotKey('hs2'), 'bad', 'not json', 'old', JSON.stringify({ k: 3, until: Date.now() - 61_000 }), 'live', JSON.stringify({ k: 2, until: Date.now() + 60_000 }));
  const errors: Error[] = [];
  const set = new HotSet({ redis: redis.client(), cluster: 'hs2', onError: (e) => errors.push(e) });
  await set.refresh();
  assert.deepEqual(set.hot(), ['live']);
  await sleep(50);
  assert.deepEqual((await client.hkeys(hotKey('hs2'))).sort(), ['live']);
  const gone = new HotSet({ redis: redis.client({ maxRetriesPerRequest: 0 }), cluster: 'hs2', onError: (e) => errors.push(e) });
  await gone.refresh();
  assert.equal(gone.spreadOf('live'), 2);
  await redis.stop();
  await gone.refresh();
  assert.equal(gone.spreadOf('live'), 2, 'last view kept');
  assert.ok(errors.length >= 1);
  redis = await startRedis();
});

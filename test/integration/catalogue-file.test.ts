/**
 * The file catalogue store on a real file in a temp folder: the conformance suite, then what only a
 * shared file has: torn and garbage lines, compaction while another instance tails the file, a file
 * replaced by an older copy, and a second instance in a real child process writing while this one
 * reads and writes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFileSync, copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { FileStore } from '../../src/catalogue/file-store.ts';
import type { CatalogueRow, RowWrite } from '../../src/catalogue/store.ts';
import { describeStoreConformance, readAll, until } from '../helpers/store-conformance.ts';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const tenant = (id: string, doc: Record<string, unknown> = {}): RowWrite => ({ kind: 'tenant', id, deleted: false, doc });
const rowLine = (version: number, id: string, doc: Record<string, unknown> = {}): string => JSON.stringify({ kind: 'tenant', id, version, deleted: false, doc, at: 1_700_000_000_000 + version, actor: 'hand' });
const lines = (path: string): string[] => readFileSync(path, 'utf8').split('\n').filter((l) => l !== '');

describe('catalogue store in a file', () => {
  const dir = mkdtempSync(join(tmpdir(), 'quotaring-file-store-'));
  let files = 0;
  const file = (): string => join(dir, `t${++files}.ndjson`);
  let opened: FileStore[] = [];
  const open = async (path: string, onProblem?: (p: string) => void): Promise<FileStore> => {
    const s = new FileStore({ path, ...(onProblem === undefined ? {} : { onProblem }) });
    opened.push(s);
    await s.open();
    return s;
  };
  afterEach(async () => {
    const stores = opened;
    opened = [];
    await Promise.all(stores.map((s) => s.close()));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  describeStoreConformance('file', (backing) => new FileStore({ path: join(dir, 'conformance', `${backing}.ndjson`) }));

  test('a torn last line is not applied until its newline; a multi-byte character split across reads survives', async () => {
    const path = file();
    const s = await open(path);
    const [w] = await s.write({ actor: 'x', rows: [tenant('a')] });
    const line = Buffer.from(`${rowLine((w?.version ?? 0) + 1, 'b', { name: 'Zoë ☃' })}\n`);
    const cut = line.indexOf(Buffer.from('ë')) + 1; // inside the two bytes of ë
    appendFileSync(path, line.subarray(0, cut));
    assert.equal((await s.head()).version, w?.version);
    assert.deepEqual(await s.readSince(w?.version ?? 0, 10), []);
    await sleep(300); // a poll or two: still waiting
    assert.equal((await s.head()).version, w?.version);
    appendFileSync(path, line.subarray(cut));
    const [b] = await s.readSince(w?.version ?? 0, 10);
    assert.equal(b?.id, 'b');
    assert.deepEqual(b?.doc, { name: 'Zoë ☃' });
    assert.deepEqual(s.problems(), []);
  });

  test('a torn line left by a crashed writer is ended by the next write: skipped and reported, the write intact', async () => {
    const path = file();
    const reader = await open(path);
    const writer = await open(path);
    const [w] = await writer.write({ actor: 'x', rows: [tenant('a')] });
    appendFileSync(path, rowLine((w?.version ?? 0) + 1, 'crashed').slice(0, 25));
    const [next] = await writer.write({ actor: 'x', rows: [tenant('b')] });
    assert.equal(next?.version, (w?.version ?? 0) + 1, 'the torn line was never a version');
    assert.deepEqual((await readAll(reader)).map((r) => r.id), ['a', 'b']);
    assert.equal(reader.problems().length, 1);
    assert.match(reader.problems()[0] ?? '', /not JSON/);
  });

  test('garbage lines are skipped and reported, never thrown; the good lines around them apply', async () => {
    const path = file();
    const bad = [
      'not json',
      '[1, 2]',
      '"a string"',
      'null',
      '{}',
      rowLine(2, 'bad id'),
      rowLine(2, 'x'.repeat(65)),
      JSON.stringify({ kind: 'nope', id: 'k', version: 2, deleted: false, doc: {}, at: 1, actor: 'a' }),
      JSON.stringify({ kind: 'tenant', id: 'k', version: 2.5, deleted: false, doc: {}, at: 1, actor: 'a' }),
      JSON.stringify({ kind: 'tenant', id: 'k', version: 2, deleted: 'no', doc: {}, at: 1, actor: 'a' }),
      JSON.stringify({ kind: 'tenant', id: 'k', version: 2, deleted: false, doc: [], at: 1, actor: 'a' }),
      JSON.stringify({ advance: 'x' }),
    ];
    writeFileSync(path, [rowLine(1, 'one'), ...bad, rowLine(3, 'three'), rowLine(2, 'late'), rowLine(3, 'same'), rowLine(5, 'five'), ''].join('\n'));
    const told: string[] = [];
    const s = await open(path, (p) => told.push(p));
    assert.deepEqual((await readAll(s)).map((r) => [r.id, r.version]), [['one', 1], ['three', 3], ['five', 5]]);
    assert.equal(s.problems().length, bad.length + 2, s.problems().join('\n'));
    assert.deepEqual(told, s.problems());
    assert.ok(s.problems().every((p) => p.includes(path) && /line at byte \d+/.test(p)));
    assert.match(s.problems().at(-1) ?? '', /version 3 is not after 3/);
    const [w] = await s.write({ actor: 'x', rows: [tenant('six')] });
    assert.equal(w?.version, 6);
  });

  test('compaction keeps the latest line of each row, the advance floor and tombstones; another instance tailing the file reads the new one', async () => {
    const path = file();
    const a = await open(path);
    const b = await open(path);
    const heardByB: number[] = [];
    b.onChange((v) => heardByB.push(v));
    const [first] = await a.write({ actor: 'x', rows: [tenant('t0', { round: 0 })] });
    for (let round = 1; round <= 10; round++) await a.write({ actor: 'x', rows: Array.from({ length: 5 }, (_, i) => tenant(`t${i}`, { round })) });
    await a.write({ actor: 'x', rows: [{ ...tenant('t4'), deleted: true }] });
    const head = (await a.head()).version;
    await b.advanceTo(head + 100);
    const rowsBefore = await readAll(b);
    assert.equal((await b.head()).version, head);

    assert.deepEqual(await a.compact(), { before: 52, after: 5 });
    assert.equal(lines(path).length, 1 + 1 + 5, 'the compaction mark, the advance floor, one line per row');
    assert.deepEqual(await readAll(a), rowsBefore);
    assert.deepEqual(await readAll(b), rowsBefore, 'b noticed the new file');
    assert.deepEqual(await b.head(), { version: head, consistent: true });
    assert.equal((await b.head({ version: first?.version ?? 0, at: first?.at ?? 0 })).consistent, true, 'a superseded write compacted away is not a restore');
    assert.equal((await b.head({ version: head + 1, at: 1 })).consistent, false);
    assert.equal((await b.audit(undefined, 100)).length, 5, 'the audit history of superseded lines is gone (the trade-off)');

    const [next] = await a.write({ actor: 'x', rows: [tenant('t9')] });
    assert.ok((next?.version ?? 0) > head + 100, 'the advance floor survived');
    await until('b told of the write after compaction', () => heardByB.includes(next?.version ?? -1));
    assert.deepEqual(await b.readSince(head, 10), [next]);
  });

  test('open compacts a file of more than 10,000 lines that is mostly superseded, and only such a file', async () => {
    const path = file();
    const w = await open(path);
    const written = await w.write({ actor: 'import', rows: Array.from({ length: 12_000 }, (_, i) => tenant(`t${i % 100}`, { i })) });
    await w.close();
    assert.equal(lines(path).length, 12_000);
    const s = await open(path);
    assert.equal(lines(path).length, 101);
    const latest = written.slice(-100);
    assert.deepEqual(await readAll(s), latest);

    const distinct = file();
    const d = await open(distinct);
    await d.write({ actor: 'import', rows: Array.from({ length: 10_001 }, (_, i) => tenant(`t${i}`)) });
    await open(distinct);
    assert.equal(lines(distinct).length, 10_001, 'every line is a row: nothing to compact');
  });

  test('a file replaced by an older copy is read again from the start, and head reports it went back', async () => {
    const path = file();
    const s = await open(path);
    const [w1] = await s.write({ actor: 'x', rows: [tenant('a')] });
    copyFileSync(path, `${path}.backup`);
    const [w2] = await s.write({ actor: 'x', rows: [tenant('b')] });
    copyFileSync(`${path}.backup`, `${path}.tmp`);
    renameSync(`${path}.tmp`, path);
    assert.deepEqual(await s.head({ version: w2?.version ?? 0, at: w2?.at ?? 0 }), { version: w1?.version, consistent: false });
    assert.deepEqual(await readAll(s), [w1]);
    // Truncated in place (same file, smaller): read again too.
    writeFileSync(path, '');
    assert.deepEqual(await s.head({ version: w1?.version ?? 0, at: w1?.at ?? 0 }), { version: 0, consistent: false });
  });

  test('another process writing while this one reads and writes: one version each, in order, none missed', async () => {
    const path = file();
    const script = join(dir, 'child-writer.mts');
    writeFileSync(
      script,
      [
        `import { FileStore } from ${JSON.stringify(pathToFileURL(join(REPO, 'src/catalogue/file-store.ts')).href)};`,
        'const [path, count] = process.argv.slice(2);',
        'const s = new FileStore({ path });',
        'await s.open();',
        "process.stdout.write('ready\\n');",
        "for (let i = 0; i < Number(count); i++) await s.write({ actor: 'child', rows: [{ kind: 'tenant', id: `child${i}`, deleted: false, doc: { i } }] });",
        'await s.close();',
      ].join('\n'),
    );
    const mine = await open(path);
    const follower = await open(path);
    const heard: number[] = [];
    follower.onChange((v) => heard.push(v));
    const seen = new Map<string, number>();
    let since = 0;
    const readNew = async (): Promise<number> => {
      const rows = await follower.readSince(since, 5);
      for (const r of rows) {
        assert.ok(r.version > since);
        assert.ok(!seen.has(r.id), `${r.id} twice`);
        seen.set(r.id, r.version);
        since = r.version;
      }
      return rows.length;
    };

    const child = spawn(process.execPath, ['--import', 'tsx', script, path, '40'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    let childDone = false;
    void exited.then(() => (childDone = true));
    await until('the child opened the store', () => output.includes('ready') || childDone, 60_000);
    const written: CatalogueRow[] = [];
    for (let i = 0; i < 40 || !childDone; i++) {
      if (i < 40) written.push(...(await mine.write({ actor: 'parent', rows: [tenant(`parent${i}`)] })));
      await readNew();
      if (i >= 40) await sleep(5);
    }
    assert.equal(await exited, 0, output);
    while ((await readNew()) > 0);

    assert.equal(seen.size, 80);
    assert.equal(new Set(seen.values()).size, 80, 'no version given twice');
    for (const r of written) assert.equal(seen.get(r.id), r.version);
    const head = (await follower.head()).version;
    assert.equal(Math.max(...seen.values()), head);
    await until('the follower told of the last write', () => heard.includes(head));
    assert.deepEqual(follower.problems(), []);
  });
});

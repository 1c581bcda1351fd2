/**
 * Exact counting in O(n log n) per piece (issue 14, finding 3: js-tiktoken's quadratic byte-pair
 * merge froze a node for 122 s on one 32,000-character word, 13+ minutes on 32,000 CJK
 * characters), and the per-request merge budget.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100kRanks from 'js-tiktoken/ranks/cl100k_base';
import o200kRanks from 'js-tiktoken/ranks/o200k_base';
import { countPiece, rankTable, utf8Binary } from '../../src/tokens/bpe.ts';
import { PromptCounter, byteBound, exactCounter, mergeBudget } from '../../src/tokens/index.ts';

const RANKS = { o200k_base: o200kRanks, cl100k_base: cl100kRanks } as const;
const ENCODINGS = ['o200k_base', 'cl100k_base'] as const;

let seed = 11;
const rand = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
const pick = (alphabet: string, n: number): string => {
  const a = [...alphabet];
  let s = '';
  for (let i = 0; i < n; i++) s += a[Math.floor(rand() * a.length)];
  return s;
};
const ALPHABETS = ['abcdefghijklmnopqrstuvwxyz', 'aAbBcC', 'AAAAAAAB', '的一是不了人我在有他这中大来上国', 'ひらがなカタカナ', '한국어텍스트', '😀🎉👍🏽🔥', '_-=+*!?', 'äöüßéèçñ', 'x9 \n\t.', 'aaaaaaaaab'];
const PROSE = readFileSync(new URL('../../node_modules/fastify/docs/Guides/Getting-Started.md', import.meta.url), 'utf8');

describe('byte-pair merge of one piece', () => {
  test('equals js-tiktoken on 600 random pieces per encoding (1–160 chars, Latin, CJK, Hangul, emoji, punctuation)', () => {
    for (const encoding of ENCODINGS) {
      const table = rankTable(RANKS[encoding].bpe_ranks);
      const reference = new Tiktoken(RANKS[encoding]);
      for (let k = 0; k < 600; k++) {
        const piece = pick(ALPHABETS[k % ALPHABETS.length] as string, 1 + Math.floor(rand() * 160));
        // One piece as BPE sees it, whatever the pre-tokenizer would make of it: js-tiktoken merges each regex match, so compare match by match.
        for (const m of piece.matchAll(new RegExp(RANKS[encoding].pat_str, 'gu'))) {
          assert.equal(countPiece(table, utf8Binary(m[0])), reference.encode(m[0], [], []).length, `${encoding} ${JSON.stringify(m[0])}`);
        }
      }
    }
  });
  test('exact counts of whole texts equal js-tiktoken (prose, code, words of each kind of 500 chars, pieces of 100+ bytes)', () => {
    // js-tiktoken's own merge is quadratic: 500-character words keep this test to a few seconds.
    const texts = [PROSE, readFileSync(new URL('../../node_modules/fastify/lib/reply.js', import.meta.url), 'utf8'), ...ALPHABETS.map((a) => pick(a, 500)), 'a'.repeat(999), '的'.repeat(300)];
    for (const encoding of ENCODINGS) {
      const reference = new Tiktoken(RANKS[encoding]);
      for (const text of texts) assert.equal(exactCounter(encoding).count(text), reference.encode(text, [], []).length, `${encoding} ${JSON.stringify(text.slice(0, 40))}`);
    }
  });
  test('a 32,000-character word and 32,000 CJK characters count in well under a second (was 122 s and 13+ min)', () => {
    // A generous 2 s bound: a regression guard against the quadratic merge (100+ s), not a speed
    // measurement (the machine may be loaded; `npm run bench:tokens` measures ~15–50 ms).
    for (const encoding of ENCODINGS) {
      for (const text of [pick('abcdefghijklmnopqrstuvwxyz', 32_000), pick('的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年', 32_000), '😀'.repeat(16_000)]) {
        const t0 = performance.now();
        const n = exactCounter(encoding).count(text);
        const ms = performance.now() - t0;
        assert.ok(n > 0 && n <= byteBound(text));
        assert.ok(ms < 2_000, `${encoding}: ${text.length} chars took ${ms.toFixed(0)} ms`);
      }
    }
  });
});

describe('merge budget', () => {
  test('a budget that covers the text gives the exact count; a smaller one errs high, never low, and at most the UTF-8 bytes', () => {
    const texts = [PROSE.slice(0, 6_000), pick('abcdefghijklmnopqrstuvwxyz', 3_000), pick('的一是不了人我在有他', 2_000), pick('😀🎉👍🏽', 1_000), `${PROSE.slice(0, 500)} ${pick('!?*', 800)} ${PROSE.slice(500, 900)}`];
    for (const encoding of ENCODINGS) {
      const counter = exactCounter(encoding);
      for (const text of texts) {
        const exact = counter.count(text);
        const bytes = byteBound(text);
        const full = exactCounter(encoding).countWithin(`${text} `, mergeBudget(bytes + 1));
        assert.deepEqual(full, { tokens: counter.count(`${text} `), bounded: false }, 'a budget of the whole text is never spent');
        for (const budget of [0, 1, 16, 300, 2_000]) {
          const b = mergeBudget(budget);
          // A suffix the cache has not seen, so the budget is actually used.
          const probe = `${text}\u0000${budget}`;
          const c = counter.countWithin(probe, b);
          const truth = counter.count(probe);
          assert.ok(c.tokens >= truth, `${encoding} budget ${budget}: ${c.tokens} < exact ${truth}`);
          assert.ok(c.tokens <= byteBound(probe), `${encoding} budget ${budget}: ${c.tokens} > bytes`);
          if (!c.bounded) assert.equal(c.tokens, truth);
          else assert.equal(b.spent, true);
        }
        assert.ok(exact <= bytes);
      }
    }
  });
  test('a spent budget charges the next texts their byte length without reading them; bounded counts are not cached', () => {
    const counter = exactCounter('o200k_base');
    const word = pick('abcdefghijklmnopqrstuvwxyz', 5_000);
    const b = mergeBudget(100);
    assert.deepEqual(counter.countWithin(word, b), { tokens: 5_000, bounded: true });
    assert.equal(b.spent, true);
    assert.equal(counter.cached(word), undefined, 'an upper bound is not cached as the count');
    const prose = `${PROSE.slice(0, 3_000)} once more`;
    assert.deepEqual(counter.countWithin(prose, b), { tokens: byteBound(prose), bounded: true });
    assert.ok(counter.count(word) < 5_000 * 0.7, 'the exact count of a random word is well below its bytes');
  });
  test('a piece so long that the pre-tokenizer regex overflows V8’s backtracking stack is charged its bytes, not thrown', () => {
    const text = '的'.repeat(4_194_304); // 4M CJK characters: one piece
    for (const encoding of ENCODINGS) {
      assert.throws(() => new RegExp(RANKS[encoding].pat_str, 'gu').exec(text), RangeError, 'V8 cannot match this piece');
      // No budget: only the regex's failure stops it from merging 12 MB.
      assert.deepEqual(exactCounter(encoding).countWithin(text, undefined), { tokens: byteBound(text), bounded: true });
    }
  });
  test('PromptCounter spends one budget per request across inline and worker texts, and never counts below exact', async () => {
    const counter = new PromptCounter({ workerThresholdChars: 2_000, mergeBudgetBytes: 3_000, poolSize: 1 });
    try {
      const words = Array.from({ length: 4 }, () => pick('abcdefghijklmnopqrstuvwxyz', 1_500));
      const body = { messages: words.map((content) => ({ role: 'user', content })) };
      const reference = new Tiktoken(o200kRanks);
      const w = words.map((t) => reference.encode(t, [], []).length);
      const truth = w.reduce((n, tokens) => n + 3 + 1 + tokens, 3);
      const n = await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' });
      assert.equal(counter.poolStarted, true, 'the texts past 2,000 new characters went to the worker');
      // Texts in order: role, content per message (3 + role + content each, 3 for the reply).
      // Budget 3,000 bytes: word 1 merged inline (1,500 left), word 2 in the worker (0 left), word 3
      // spends it and is charged its 1,500 bytes; then the role 'user' is charged 4 bytes (1 token
      // exactly) and word 4 its 1,500 bytes, unread.
      assert.equal(n, 3 + (3 + 1 + (w[0] as number)) + (3 + 1 + (w[1] as number)) + (3 + 1 + 1_500) + (3 + 4 + 1_500));
      assert.ok(n >= truth);
      assert.equal(exactCounter('o200k_base').cached(words[0] as string), w[0], 'the exact counts are cached');
      assert.equal(exactCounter('o200k_base').cached(words[2] as string), undefined, 'the bounded ones are not');
      const again = await new PromptCounter({ mergeBudgetBytes: 1_000_000 }).count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' });
      assert.equal(again, truth, 'with budget enough, the same body counts exactly');
    } finally {
      await counter.close();
    }
  });
});

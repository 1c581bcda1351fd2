/**
 * Worst-case cost of exact token counting per character (issue 14, finding 3: one 32,000-character
 * word froze a node for 122 s with js-tiktoken's quadratic byte-pair merge).
 *
 * For each kind of text — one ASCII word (random a–z, a single pre-tokenizer piece), one run of
 * ASCII punctuation, CJK (one piece), emoji (one piece), random bytes decoded as UTF-8, and
 * English prose — and each length from 1k characters to the body limit (4 MiB, `server.body_limit`),
 * the o200k_base and cl100k_base exact counters count a text no cache has seen:
 *
 * - `exact`: `ExactCounter.count` (every piece merged, no budget), µs per character, worst of the
 *   runs, up to 1M characters;
 * - `budget`: `countWithin` with the default request budget (`tokens.merge_budget_bytes`, 512 KiB),
 *   what the gateway's worker spends at most; `bounded` says whether the budget ran out;
 * - `old`: js-tiktoken's `encode` per piece (the code before the fix), run only while one count
 *   took < 1.5 s (its cost quadruples with each doubling of the piece, so longer ones are skipped);
 * - `estimate`: the character estimate, for scale.
 *
 * Bounded to about a minute. Run: `npm run bench:tokens` (`-- --quick` stops at 256k characters).
 * Prints a table, then one JSON line.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100kRanks from 'js-tiktoken/ranks/cl100k_base';
import o200kRanks from 'js-tiktoken/ranks/o200k_base';
import { mergeBudget } from '../../src/tokens/exact.ts';
import { estimateCounter, exactCounter, type EncodingName } from '../../src/tokens/index.ts';

const quick = process.argv.includes('--quick');
const LENGTHS = [1_024, 4_096, 16_384, 65_536, 262_144, 1_048_576, 4_194_304].filter((n) => !quick || n <= 262_144);
/** Longest text counted without a budget (beyond, only the budgeted count runs: what the gateway does). */
const EXACT_MAX = 1_048_576;
/** The default `tokens.merge_budget_bytes`. */
const BUDGET = 524_288;
/** Characters counted per (kind, length) at least, so short texts are timed over several runs. */
const MIN_CHARS = 131_072;
const OLD_MAX_MS = 2_000;

let seed = 7;
const rand = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
const pick = (alphabet: readonly string[], n: number): string => {
  let s = '';
  while (s.length < n) s += alphabet[Math.floor(rand() * alphabet.length)];
  return s.slice(0, n);
};
const chars = (s: string): string[] => [...s];
const PROSE = readFileSync(new URL('../../node_modules/fastify/docs/Reference/Routes.md', import.meta.url), 'utf8');

/** Text generators: each call returns a new text of `n` UTF-16 units (none repeats, so no cache helps). */
const KINDS: Record<string, (n: number) => string> = {
  'ascii word': (n) => pick(chars('abcdefghijklmnopqrstuvwxyz'), n),
  punctuation: (n) => pick(chars('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'), n),
  CJK: (n) => pick(chars('的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明'), n),
  emoji: (n) => pick(chars('😀🎉👍🏽🔥💯🚀🧪🫠'), n),
  'random bytes': (n) => Buffer.from(randomBytes(n * 2)).toString('utf8').slice(0, n),
  prose: (n) => {
    const start = Math.floor(rand() * PROSE.length);
    let s = `[${Math.floor(rand() * 1e9)}] `;
    while (s.length < n) s += PROSE.slice(start) + PROSE;
    return s.slice(0, n);
  },
};

/** The counting code before the fix: pre-tokenizer regex, then js-tiktoken's `encode` per piece. */
function oldCounter(ranks: typeof o200kRanks): (text: string) => number {
  const tiktoken = new Tiktoken(ranks);
  const pattern = new RegExp(ranks.pat_str, 'gu');
  return (text) => {
    let n = 0;
    for (const m of text.matchAll(pattern)) n += tiktoken.encode(m[0], [], []).length;
    return n;
  };
}

const ms = (f: () => void): number => {
  const t0 = performance.now();
  f();
  return performance.now() - t0;
};

interface Row {
  encoding: EncodingName;
  kind: string;
  chars: number;
  /** Median over the runs, µs per character (null: not run, longer than {@link EXACT_MAX}). */
  exactUsPerChar: number | null;
  /** Slowest run, ms: what one count may block its thread for. */
  exactMaxMs: number | null;
  budgetUsPerChar: number;
  budgetMaxMs: number;
  bounded: boolean;
  oldUsPerChar: number | null;
  estimateUsPerChar: number;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const rows: Row[] = [];
for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
  const exact = exactCounter(encoding);
  exact.count('warm up the rank table');
  const old = oldCounter(encoding === 'o200k_base' ? o200kRanks : cl100kRanks);
  const estimate = estimateCounter(encoding);
  for (const [kind, make] of Object.entries(KINDS)) {
    exact.count(make(4_096)); // warm up this kind's code paths
    let oldLastMs = 0;
    for (const n of LENGTHS) {
      const runs = Math.max(1, Math.min(7, Math.floor(MIN_CHARS / n)));
      const exactMs: number[] = [];
      const budgetMs: number[] = [];
      const estimateMs: number[] = [];
      let bounded = false;
      for (let r = 0; r < runs; r++) {
        if (n <= EXACT_MAX) {
          const a = make(n);
          exactMs.push(ms(() => exact.count(a)));
        }
        const b = make(n);
        budgetMs.push(
          ms(() => {
            bounded = exact.countWithin(b, mergeBudget(BUDGET)).bounded || bounded;
          }),
        );
        estimateMs.push(ms(() => estimate.count(b)));
      }
      let oldMs: number | null = null;
      // Quadratic: 4× the characters, up to 16× the time. Skip what would exceed the cap.
      if (oldLastMs * 16 <= OLD_MAX_MS) {
        oldMs = ms(() => old(make(n)));
        oldLastMs = oldMs;
      } else oldLastMs = Infinity;
      const perChar = (t: number): number => Number(((t * 1000) / n).toFixed(3));
      rows.push({
        encoding,
        kind,
        chars: n,
        exactUsPerChar: exactMs.length > 0 ? perChar(median(exactMs)) : null,
        exactMaxMs: exactMs.length > 0 ? Number(Math.max(...exactMs).toFixed(1)) : null,
        budgetUsPerChar: perChar(median(budgetMs)),
        budgetMaxMs: Number(Math.max(...budgetMs).toFixed(1)),
        bounded,
        oldUsPerChar: oldMs === null ? null : perChar(oldMs),
        estimateUsPerChar: perChar(median(estimateMs)),
      });
    }
  }
}

console.log('µs per character, median of the runs; max ms = slowest run; old = js-tiktoken encode per piece (– : skipped)');
console.log(['encoding', 'kind', 'chars', 'exact µs/char', 'exact max ms', 'budget µs/char', 'budget max ms', 'bounded', 'old µs/char', 'estimate µs/char'].join(' | '));
for (const r of rows) {
  console.log([r.encoding, r.kind, r.chars, r.exactUsPerChar ?? '–', r.exactMaxMs ?? '–', r.budgetUsPerChar, r.budgetMaxMs, r.bounded ? 'yes' : 'no', r.oldUsPerChar ?? '–', r.estimateUsPerChar].join(' | '));
}
const worst = (key: 'exactUsPerChar' | 'budgetUsPerChar', minChars: number): number => Math.max(...rows.filter((r) => r.chars >= minChars).map((r) => r[key] ?? 0));
console.log(`worst median µs/char, texts of 16k+ chars: exact ${worst('exactUsPerChar', 16_384)}, with the default budget ${worst('budgetUsPerChar', 16_384)}`);
console.log(`longest budgeted count (what one request can cost a worker): ${Math.max(...rows.map((r) => r.budgetMaxMs))} ms`);
const inline = rows.filter((r) => r.chars === 1_024 || r.chars === 4_096);
console.log(`inline-sized texts (1k, 4k chars): worst median ${Math.max(...inline.map((r) => ((r.exactUsPerChar ?? 0) * r.chars) / 1000)).toFixed(1)} ms, slowest run ${Math.max(...inline.map((r) => r.exactMaxMs ?? 0))} ms`);
console.log(JSON.stringify({ bench: 'tokens-worst-case', quick, rows }));

/**
 * Benchmark of prompt counting, and the accuracy of the character estimate.
 *
 * Speed: µs per OpenAI chat of about 1k, 10k and 100k tokens (10, 20, 40 messages of English docs
 * and code from node_modules), per encoding, for the estimate, exact counting of a chat never seen
 * (cold: every text is new; the piece memo is warm, as in a running gateway), and exact counting
 * of a chat whose history was counted on the previous turn (cached: only the new ~60-token user
 * message is encoded), both with the raw counters (and js-tiktoken's `encode` of the same texts for reference) and through `PromptCounter.count` (what the
 * gateway calls). Each figure is the median of several runs.
 *
 * Accuracy: estimate / exact over 250 chunks (300–6,000 chars) per category of text.
 *
 * Run: `node --import tsx bench/tokens/tokens.ts [--quick]`. Prints one JSON line, then readable tables.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { PromptCounter, countOpenAIChat, estimateCounter, exactCounter } from '../../src/tokens/index.ts';
import type { EncodingName, OpenAIChatPrompt } from '../../src/tokens/index.ts';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import o200k from 'js-tiktoken/ranks/o200k_base';

/** js-tiktoken's own encoder, for reference: what exact counting costs without this module's piece memo and cache. */
const tiktokens = { o200k_base: new Tiktoken(o200k), cl100k_base: new Tiktoken(cl100k) };

const quick = process.argv.includes('--quick');
const NM = new URL('../../node_modules/', import.meta.url);
const read = (path: string): string => readFileSync(new URL(path, NM), 'utf8');
const dir = (path: string, ext: string): string[] =>
  readdirSync(new URL(path, NM))
    .filter((f) => f.endsWith(ext))
    .map((f) => read(`${path}/${f}`));
const diagnostics = (lang: string): string => Object.values(JSON.parse(read(`typescript/lib/${lang}/diagnosticMessages.generated.json`)) as string[]).join('\n');

let seed = 42;
const rand = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;

// ---------------------------------------------------------------- speed

/** English docs and code, interleaved, as the text chats are cut from. */
const SOURCE = [...dir('fastify/docs/Reference', '.md'), ...dir('fastify/lib', '.js'), ...dir('fastify/docs/Guides', '.md'), read('typescript/lib/lib.dom.d.ts')].join('\n');
let cursor = 0;
/** The next `chars` characters of the source (wrapping), prefixed by a unique tag so no cache has seen it. */
function freshText(chars: number): string {
  if (cursor + chars > SOURCE.length) cursor = 0;
  const text = SOURCE.slice(cursor, cursor + chars);
  cursor += chars;
  return `[${(rand() * 1e9).toFixed(0)}] ${text}`;
}

/** A chat of `turns` messages of about `tokens` tokens in total, as JSON.parse gives it to the gateway (flat strings). */
function freshChat(tokens: number, turns: number): { role: string; content: string }[] {
  const chars = Math.round((tokens * 4.1) / turns);
  return JSON.parse(JSON.stringify(Array.from({ length: turns }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: freshText(chars) })))) as { role: string; content: string }[];
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const nowUs = (): number => Number(process.hrtime.bigint()) / 1_000;

/** Median over `runs` of the mean µs per call over `batch` calls; `setup` builds each call's input outside the timing. */
async function time<T>(runs: number, batch: number, setup: () => T, fn: (input: T) => unknown): Promise<number> {
  const samples: number[] = [];
  for (let r = 0; r < runs; r++) {
    const inputs = Array.from({ length: batch }, setup);
    const t0 = nowUs();
    for (const input of inputs) await fn(input);
    samples.push((nowUs() - t0) / batch);
  }
  return median(samples);
}

interface SpeedRow {
  encoding: EncodingName;
  size: string;
  tokens: number;
  estimateUs: number;
  exactColdUs: number;
  tiktokenUs: number;
  exactCachedUs: number;
  promptCounterCachedUs: number;
  promptCounterColdUs: number;
}

const sizes = [
  { size: '1k', tokens: 1_000, turns: 10, runs: 9, batch: quick ? 20 : 100 },
  { size: '10k', tokens: 10_000, turns: 20, runs: 7, batch: quick ? 3 : 10 },
  { size: '100k', tokens: 100_000, turns: 40, runs: quick ? 3 : 5, batch: 1 },
];

const speed: SpeedRow[] = [];
const promptCounter = new PromptCounter({ poolSize: 2 });
for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
  const exact = exactCounter(encoding);
  const estimate = estimateCounter(encoding);
  // Warm up: tables, the piece memo on the whole source (a running gateway has seen these words), the JIT, and the worker pool.
  for (let i = 0; i < SOURCE.length; i += 50_000) exact.count(SOURCE.slice(i, i + 50_000));
  await promptCounter.count('openai_chat', { messages: freshChat(20_000, 2) }, { encoding, mode: 'exact' });
  for (const { size, tokens, turns, runs, batch } of sizes) {
    const fixed: OpenAIChatPrompt = { messages: freshChat(tokens, turns) };
    const realTokens = countOpenAIChat(fixed, exact);
    const estimateUs = await time(runs, batch * 10, () => fixed, (body) => countOpenAIChat(body, estimate));
    const exactColdUs = await time(runs, batch, () => ({ messages: freshChat(tokens, turns) }), (body) => countOpenAIChat(body, exact));
    const tiktoken = tiktokens[encoding];
    const tiktokenUs = await time(runs, batch, () => freshChat(tokens, turns), (messages) => messages.reduce((n, m) => n + tiktoken.encode(m.content, [], []).length, 0));
    // Cached: the history was counted on the previous turn; the new user message is ~60 tokens.
    const nextTurn = (): OpenAIChatPrompt => {
      const history = freshChat(tokens, turns - 1);
      countOpenAIChat({ messages: history }, exact);
      return JSON.parse(JSON.stringify({ messages: [...history, { role: 'user', content: freshText(240) }] })) as OpenAIChatPrompt;
    };
    const exactCachedUs = await time(runs, batch, nextTurn, (body) => countOpenAIChat(body, exact));
    const promptCounterCachedUs = await time(runs, batch, nextTurn, (body) => promptCounter.count('openai_chat', body, { encoding, mode: 'exact' }));
    const promptCounterColdUs = await time(runs, batch, () => ({ messages: freshChat(tokens, turns) }), (body) => promptCounter.count('openai_chat', body, { encoding, mode: 'exact' }));
    speed.push({ encoding, size, tokens: realTokens, estimateUs, tiktokenUs, exactColdUs, exactCachedUs, promptCounterCachedUs, promptCounterColdUs });
  }
}
await promptCounter.close();

// ---------------------------------------------------------------- accuracy

const categories: Record<string, string[]> = {
  'English docs': [...dir('fastify/docs/Guides', '.md'), ...dir('fastify/docs/Reference', '.md'), read('zod/README.md'), read('undici/README.md'), read('piscina/README.md')],
  'legal English': [read('typescript/ThirdPartyNoticeText.txt')],
  code: [...dir('fastify/lib', '.js'), ...dir('undici/lib/dispatcher', '.js'), read('typescript/lib/lib.es5.d.ts'), read('typescript/lib/lib.dom.d.ts').slice(0, 400_000)],
  JSON: [read('typescript/package.json'), read('fastify/package.json'), readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8').slice(0, 200_000)],
  German: [diagnostics('de')],
  French: [diagnostics('fr')],
  Russian: [diagnostics('ru')],
  Japanese: [diagnostics('ja')],
  Chinese: [diagnostics('zh-cn')],
  Korean: [diagnostics('ko')],
  'base64 / hex': [Buffer.from(Array.from({ length: 30_000 }, () => Math.floor(rand() * 256))).toString('base64'), Buffer.from(Array.from({ length: 20_000 }, () => Math.floor(rand() * 256))).toString('hex')],
};
const quantile = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))] ?? 0;
const accuracy: Record<string, Record<string, { min: number; p5: number; median: number; p95: number; max: number }>> = {};
for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
  const exact = exactCounter(encoding);
  const estimate = estimateCounter(encoding);
  const perEncoding: (typeof accuracy)[string] = {};
  seed = 7;
  for (const [cat, docs] of Object.entries(categories)) {
    const ratios: number[] = [];
    for (let i = 0; i < (quick ? 60 : 250); i++) {
      const doc = docs[Math.floor(rand() * docs.length)] ?? '';
      const len = Math.floor(300 + rand() * 5_700);
      const start = Math.floor(rand() * Math.max(1, doc.length - len));
      const text = doc.slice(start, start + len);
      const n = exact.count(text);
      if (n >= 20) ratios.push(estimate.count(text) / n);
    }
    const r2 = (x: number): number => Math.round(x * 100) / 100;
    perEncoding[cat] = { min: r2(quantile(ratios, 0)), p5: r2(quantile(ratios, 0.05)), median: r2(quantile(ratios, 0.5)), p95: r2(quantile(ratios, 0.95)), max: r2(quantile(ratios, 1)) };
  }
  accuracy[encoding] = perEncoding;
}

// ---------------------------------------------------------------- output

const round = (x: number): number => Math.round(x * 10) / 10;
console.log(JSON.stringify({ node: process.version, speedUs: speed.map((r) => ({ ...r, estimateUs: round(r.estimateUs), exactColdUs: round(r.exactColdUs), tiktokenUs: round(r.tiktokenUs), exactCachedUs: round(r.exactCachedUs), promptCounterCachedUs: round(r.promptCounterCachedUs), promptCounterColdUs: round(r.promptCounterColdUs) })), accuracy }));
console.log('\nprompt counting, µs per chat (median of runs)');
console.log('encoding     size   tokens   estimate   js-tiktoken   exact cold   exact cached   PromptCounter cached   PromptCounter cold');
for (const r of speed) {
  const f = (x: number, w: number): string => (x < 100 ? x.toFixed(1) : x.toFixed(0)).padStart(w);
  console.log(`${r.encoding.padEnd(12)} ${r.size.padStart(4)} ${String(r.tokens).padStart(8)} ${f(r.estimateUs, 10)} ${f(r.tiktokenUs, 13)} ${f(r.exactColdUs, 12)} ${f(r.exactCachedUs, 14)} ${f(r.promptCounterCachedUs, 22)} ${f(r.promptCounterColdUs, 20)}`);
}
console.log('(PromptCounter cold ≥ 32,768 new characters runs in the worker pool: wall time, the event loop is free meanwhile)');
console.log('\nestimate / exact over text chunks: median (p5 – p95) [min]');
for (const [encoding, cats] of Object.entries(accuracy)) {
  console.log(encoding);
  for (const [cat, q] of Object.entries(cats)) console.log(`  ${cat.padEnd(14)} ${q.median.toFixed(2)} (${q.p5.toFixed(2)} – ${q.p95.toFixed(2)}) [${q.min.toFixed(2)}]`);
}

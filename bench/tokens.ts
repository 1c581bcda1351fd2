/**
 * Micro-benchmark of prompt counting: µs per chat of 1k, 10k and 100k tokens, for the estimate,
 * exact counting of a chat never seen (cold), and exact counting of a chat whose earlier turns were
 * counted before (cached: only the new last message is encoded).
 * Run: `node --import tsx bench/tokens.ts`. Prints one JSON line, then a readable table.
 */
import { countOpenAIChat, estimateCounter, exactCounter } from '../src/tokens/index.ts';
import type { OpenAIChatPrompt } from '../src/tokens/index.ts';

const WORDS = 'the of and to in is that for it as with was on be by this are from at or an have not which but they you all can were their one there has more when will would been if so what about than other into could its time only new some these two may then first any like now such also people made after'.split(' ');
let seed = 42;
const rand = (): number => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
const sentence = (words: number): string => Array.from({ length: words }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ') + '. ';

/** A chat of `turns` messages totalling about `tokens` tokens; `salt` makes its text unique. */
function chat(tokens: number, turns: number, salt: string): { role: string; content: string }[] {
  const per = Math.max(1, Math.round(tokens / turns));
  return Array.from({ length: turns }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: `${salt} ${i}: ${sentence(Math.round(per * 0.8))}` }));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}

function timeUs(fn: () => void, reps: number): number {
  const samples: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = process.hrtime.bigint();
    fn();
    samples.push(Number(process.hrtime.bigint() - t0) / 1_000);
  }
  return median(samples);
}

const encoding = 'o200k_base';
const exact = exactCounter(encoding);
const estimate = estimateCounter(encoding);
exact.count('warm up the encoder');

const results: Record<string, Record<string, number>> = {};
for (const [label, tokens, turns, reps] of [['1k', 1_000, 10, 200], ['10k', 10_000, 20, 40], ['100k', 100_000, 40, 6]] as const) {
  const fixed: OpenAIChatPrompt = { messages: chat(tokens, turns, 'fixed') };
  const realTokens = countOpenAIChat(fixed, exact);
  let n = 0;
  const est = timeUs(() => void countOpenAIChat(fixed, estimate), reps * 5);
  const cold = timeUs(() => void countOpenAIChat({ messages: chat(tokens, turns, `cold-${n++}`) }, exact), reps);
  // Cached: the history was counted on an earlier turn; the new user message is ~50 tokens.
  countOpenAIChat(fixed, exact);
  const cached = timeUs(() => void countOpenAIChat({ messages: [...(fixed.messages ?? []), { role: 'user', content: `new ${n++} ${sentence(40)}` }] }, exact), reps * 5);
  results[label] = { tokens: realTokens, estimateUs: est, exactColdUs: cold, exactCachedUs: cached };
}
console.log(JSON.stringify({ encoding, results }));
console.log('token counting (µs per chat, median; o200k_base)');
for (const [label, r] of Object.entries(results)) {
  console.log(`  ${label.padStart(4)} chat (${r.tokens} tokens): estimate ${r.estimateUs?.toFixed(1)} µs · exact cold ${r.exactColdUs?.toFixed(0)} µs · exact with cached history ${r.exactCachedUs?.toFixed(1)} µs`);
}

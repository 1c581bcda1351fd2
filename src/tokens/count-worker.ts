/**
 * Piscina worker: exact token counts of the uncached texts of large prompts, off the gateway's
 * event loop. Each worker thread loads its own rank tables on first use.
 */
import type { EncodingName } from './encoding.ts';
import { exactCounter, mergeBudget } from './exact.ts';

/** A counting job: texts to count with one encoding, and the request's merge budget left. */
export interface CountJob {
  readonly encoding: EncodingName;
  readonly texts: readonly string[];
  /** UTF-8 bytes of pieces these texts may still byte-pair merge (see `ExactCounter.countWithin`). */
  readonly mergeBudgetBytes: number;
}

/** Tokens per text, in order, and whether each is exact (else an upper bound: the budget ran out). */
export interface CountResult {
  readonly tokens: number[];
  readonly exact: boolean[];
}

/** Counts the job's texts in order, spending one merge budget across them. */
export default function count(job: CountJob): CountResult {
  const counter = exactCounter(job.encoding);
  const budget = mergeBudget(job.mergeBudgetBytes);
  const tokens: number[] = [];
  const exact: boolean[] = [];
  for (const text of job.texts) {
    const c = counter.countWithin(text, budget);
    tokens.push(c.tokens);
    exact.push(!c.bounded);
  }
  return { tokens, exact };
}

/**
 * Piscina worker: exact token counts of the uncached texts of large prompts, off the gateway's
 * event loop. Each worker thread loads its own tokenizer tables on first use.
 */
import type { EncodingName } from './encoding.ts';
import { exactCounter } from './exact.ts';

/** A counting job: texts to count with one encoding. */
export interface CountJob {
  readonly encoding: EncodingName;
  readonly texts: readonly string[];
}

/** Counts each text of the job exactly; returns tokens per text, in order. */
export default function count(job: CountJob): number[] {
  const counter = exactCounter(job.encoding);
  return job.texts.map((t) => counter.count(t));
}

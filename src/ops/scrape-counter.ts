/** A prom-client counter set at scrape time from a count kept by the code that owns it. */
import type { Counter } from 'prom-client';

/** Sets a cumulative counter to `value` at scrape time (for counts kept by the code that owns them). */
export function setCounter(counter: Counter<string>, labels: Record<string, string>, value: number): void {
  counter.remove(labels);
  if (value > 0) counter.inc(labels, value);
}

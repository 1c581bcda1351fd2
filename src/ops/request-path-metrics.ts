/**
 * Counters and histograms for the request path: each series keeps plain numbers found by a key the
 * caller builds (`result|kind|tier`), and prom-client's registry reads them at scrape time (they
 * implement what `Registry.registerMetric` needs: `name`, `help`, `type`, `get()`). prom-client's
 * own `inc`/`observe` validate and hash the label object on every call; a node records 5-7 of those
 * per request, which cost 5-10% of a node's CPU per request in a profile against the simulator
 * answering at once (bench/node/node.ts). Exposition stays prom-client's.
 */
import type { Registry } from 'prom-client';

/** One labelled series. */
interface Series {
  readonly labels: Readonly<Record<string, string>>;
}

/** A monotonically increasing count per label set (Prometheus `counter`). */
export class PathCounter {
  readonly name: string;
  readonly help: string;
  readonly type = 'counter';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, Series & { value: number }>();

  /** Registers itself in `registry` under `name` (which must end in `_total`). */
  constructor(registry: Registry, name: string, help: string) {
    this.name = name;
    this.help = help;
    registry.registerMetric(this as never);
  }

  /**
   * Adds `by` (≥ 0) to the series `key`; `labels` builds its label set the first time the key is seen.
   * @param key a string unique per label set, e.g. the label values joined by `|`.
   */
  add(key: string, labels: () => Record<string, string>, by = 1): void {
    const s = this.#series.get(key);
    if (s !== undefined) s.value += by;
    else this.#series.set(key, { labels: labels(), value: by });
  }

  /** The series as prom-client formats them. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { value: number; labels: Readonly<Record<string, string>> }[] } {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: [...this.#series.values()].map((s) => ({ value: s.value, labels: s.labels })) };
  }
}

/** Observations per label set in fixed buckets (Prometheus `histogram`: `_bucket{le}`, `_sum`, `_count`). */
export class PathHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly #bounds: readonly number[];
  readonly #series = new Map<string, Series & { counts: Float64Array; sum: number; count: number }>();

  /** @param bounds upper bounds of the buckets, increasing (`+Inf` is added). */
  constructor(registry: Registry, name: string, help: string, bounds: readonly number[]) {
    this.name = name;
    this.help = help;
    this.#bounds = bounds;
    registry.registerMetric(this as never);
  }

  /** Records `value` in the series `key` (see {@link PathCounter.add}). */
  observe(key: string, labels: () => Record<string, string>, value: number): void {
    let s = this.#series.get(key);
    if (s === undefined) this.#series.set(key, (s = { labels: labels(), counts: new Float64Array(this.#bounds.length + 1), sum: 0, count: 0 }));
    let i = 0;
    while (i < this.#bounds.length && value > (this.#bounds[i] as number)) i++;
    (s.counts[i] as number)++;
    s.sum += value;
    s.count++;
  }

  /** Cumulative buckets, sum and count of every series, as prom-client formats them. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { value: number; labels: Record<string, string | number>; metricName: string }[] } {
    const values: { value: number; labels: Record<string, string | number>; metricName: string }[] = [];
    for (const s of this.#series.values()) {
      let cumulative = 0;
      for (let i = 0; i <= this.#bounds.length; i++) {
        cumulative += s.counts[i] as number;
        values.push({ value: cumulative, labels: { le: i < this.#bounds.length ? (this.#bounds[i] as number) : '+Inf', ...s.labels }, metricName: `${this.name}_bucket` });
      }
      values.push({ value: s.sum, labels: { ...s.labels }, metricName: `${this.name}_sum` });
      values.push({ value: s.count, labels: { ...s.labels }, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

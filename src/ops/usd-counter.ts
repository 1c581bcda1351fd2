/**
 * A Prometheus counter of money: each series adds integer pico-dollars (`bigint`, exact, as the
 * limiter counts them; see `src/pricing/usd.ts`) and is shown in US dollars only at scrape time, as
 * the double nearest to its exact decimal value (one rounding, never a float sum that drifts).
 * Registered like {@link PathCounter} (`name`, `help`, `type`, `get()`), exposition by prom-client.
 */
import type { Registry } from 'prom-client';

const PICO_PER_USD = 1_000_000_000_000n;

/** `pico` p$ as the nearest double in US dollars (parsed from its exact 12-decimal text). */
export function picoToUsd(pico: bigint): number {
  const sign = pico < 0n ? '-' : '';
  const a = pico < 0n ? -pico : pico;
  return Number(`${sign}${a / PICO_PER_USD}.${String(a % PICO_PER_USD).padStart(12, '0')}`);
}

/** A monotonically increasing amount of money per label set (Prometheus `counter`, in USD). */
export class UsdCounter {
  readonly name: string;
  readonly help: string;
  readonly type = 'counter';
  readonly aggregator = 'sum';
  readonly #series = new Map<string, { readonly labels: Readonly<Record<string, string>>; pico: bigint }>();

  /** Registers itself in `registry` under `name` (which must end in `_usd_total`). */
  constructor(registry: Registry, name: string, help: string) {
    this.name = name;
    this.help = help;
    registry.registerMetric(this as never);
  }

  /**
   * Adds `pico` pico-dollars to the series `key`; `labels` builds its label set the first time the key is seen.
   * @throws RangeError when `pico` is negative (a counter never goes down).
   */
  add(key: string, labels: () => Record<string, string>, pico: bigint): void {
    if (pico < 0n) throw new RangeError(`a counter only goes up: got ${pico} p$`);
    const s = this.#series.get(key);
    if (s !== undefined) s.pico += pico;
    else this.#series.set(key, { labels: labels(), pico });
  }

  /** The series as prom-client formats them, in US dollars. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { value: number; labels: Readonly<Record<string, string>> }[] } {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: [...this.#series.values()].map((s) => ({ value: picoToUsd(s.pico), labels: s.labels })) };
  }
}

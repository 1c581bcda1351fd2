/**
 * Money as integers. Config and headers speak US dollars as decimals; the gateway never holds
 * dollars in a float:
 * - prices are integer **micro-dollars per million tokens** (µ$/M; `$2.50` per million = 2_500_000);
 * - budgets are integer **micro-dollars** (µ$; `$50` = 50_000_000);
 * - spend is counted in integer **pico-dollars** (p$ = 10⁻¹² USD) as `bigint`: one token at a
 *   price of `p` µ$/M costs exactly `p` p$, so the ledger is exact (no rounding anywhere between a
 *   provider's reported usage and a budget), and a bigint never overflows (a $10,000 budget is
 *   10¹⁶ p$, beyond 2⁵³).
 * Displayed remainders are rounded down to the micro-dollar (never shows more than is left).
 */

/** Pico-dollars in a micro-dollar. */
export const PICO_PER_MICRO = 1_000_000n;

/** Most decimal places a USD amount in config may have: a micro-dollar. */
const MAX_DECIMALS = 6;

/**
 * Parses a USD amount (`2.5`, `"0.075"`, `"1000"`, `"$50"`) to integer micro-dollars, exactly: the
 * decimal text is read digit by digit, never through a float product.
 * @returns µ$ (a safe integer ≥ 0), or undefined when the value is not a non-negative decimal
 *   with at most 6 decimal places (`1e-7`, `"-1"`, `"0.0000001"`, `"abc"`) or exceeds 2⁵³ µ$.
 */
export function parseUsdMicros(value: number | string): number | undefined {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) return undefined;
    text = String(value); // shortest round-trip text: 2.5 → "2.5", 1e-7 → "1e-7" (refused below)
  } else text = value.trim().replace(/^\$/, '');
  const m = /^(\d+)(?:\.(\d*))?$/.exec(text);
  if (m === null) return undefined;
  const frac = m[2] ?? '';
  if (frac.length > MAX_DECIMALS) {
    if (!/^0*$/.test(frac.slice(MAX_DECIMALS))) return undefined;
  }
  const micros = BigInt(m[1] ?? '0') * 1_000_000n + BigInt((frac.slice(0, MAX_DECIMALS) + '000000').slice(0, MAX_DECIMALS));
  return micros <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(micros) : undefined;
}

/** `12_345_678` µ$ → `"12.345678"` (six decimals, no float). Negative amounts keep their sign. */
export function formatMicros(micros: number | bigint): string {
  const v = BigInt(micros);
  const neg = v < 0n;
  const a = neg ? -v : v;
  return `${neg ? '-' : ''}${a / 1_000_000n}.${String(a % 1_000_000n).padStart(6, '0')}`;
}

/** Pico-dollars → micro-dollars, rounded down (toward −∞). */
export function picoToMicrosFloor(pico: bigint): bigint {
  const q = pico / PICO_PER_MICRO;
  return pico < 0n && q * PICO_PER_MICRO !== pico ? q - 1n : q;
}

/** Pico-dollars → micro-dollars, rounded up (toward +∞). */
export function picoToMicrosCeil(pico: bigint): bigint {
  return -picoToMicrosFloor(-pico);
}

/** `"$0.012345"`-style text of an amount in pico-dollars, rounded up to the micro-dollar (what a request may cost). */
export function formatPicoUsdCeil(pico: bigint): string {
  return `$${formatMicros(picoToMicrosCeil(pico))}`;
}

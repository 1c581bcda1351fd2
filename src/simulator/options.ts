/**
 * Options of the provider simulator, and their resolved form with every default applied.
 */
import { systemClock, type Clock } from '../clock.ts';
import type { AwsCredentials } from '../providers/bedrock/credentials.ts';
import { DEFAULT_ARRIVAL_LOG_SIZE } from './arrivals.ts';

/**
 * The AWS credentials the Bedrock routes accept by default: the example pair of the AWS
 * documentation (access key id `AKIAIOSFODNN7EXAMPLE`), never a real account's.
 */
export const EXAMPLE_AWS_CREDENTIALS: AwsCredentials = { accessKeyId: 'AKIAIOSFODNN7EXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' };

/** Options of the provider simulator (`buildSimulator`, `startSimulator`, `quotaring simulate`). */
export interface SimulatorOptions {
  /** Ms before the first token (or the whole JSON response). @default 0 */
  ttftMs?: number;
  /** Streaming pace, tokens per second; 0 = as fast as possible (the whole stream in one write). @default 0 */
  tokensPerSecond?: number;
  /** Completion length (tokens) when neither max_tokens nor the x-sim-output-tokens header says. @default 16 */
  defaultOutputTokens?: number;
  /**
   * Per-API-key quota like a provider's; absent = unlimited. `rpm`: requests per minute,
   * `tpm`: tokens (prompt + completion) per minute; token buckets with continuous refill.
   */
  quota?: { rpm?: number; tpm?: number };
  /**
   * Fault injection rates in [0,1]: `errorRate` of requests get a 5xx reply, `dropRate` of
   * streams are cut mid-way, `slowRate` of requests wait `slowMs` more (ms) before the first token.
   * @default no faults; slowMs 5000
   */
  faults?: { errorRate?: number; dropRate?: number; slowRate?: number; slowMs?: number };
  /** Seed of the fault PRNG (same seed, same request order → same faults). @default 1 */
  seed?: number;
  /** Source of time for the quota buckets, the `created` fields and SigV4 date checks. @default systemClock */
  clock?: Clock;
  /**
   * AWS credentials whose SigV4 signatures the Bedrock routes accept (a pair with a session token
   * also requires that token); a Bedrock API key (`Authorization: Bearer …`) is always accepted.
   * @default [EXAMPLE_AWS_CREDENTIALS]
   */
  bedrockCredentials?: readonly AwsCredentials[];
  /** Arrivals kept by `GET /sim/arrivals` (a ring: the oldest are overwritten). @default 200_000 */
  arrivalLogSize?: number;
  /**
   * An outside client of API key `key` spending `fraction` (0 < f ≤ 1) of its quota per minute, not
   * through the gateway (`outside.ts`; also `POST /sim/outside`). Needs a quota. @default none
   */
  outside?: { key: string; fraction: number };
}

/** `SimulatorOptions` with every default applied and validated. */
export interface ResolvedSimulatorOptions {
  readonly ttftMs: number;
  readonly tokensPerSecond: number;
  readonly defaultOutputTokens: number;
  readonly rpm: number | null;
  readonly tpm: number | null;
  readonly errorRate: number;
  readonly dropRate: number;
  readonly slowRate: number;
  readonly slowMs: number;
  readonly seed: number;
  readonly clock: Clock;
  readonly bedrockCredentials: readonly AwsCredentials[];
  readonly arrivalLogSize: number;
}

function nonNegative(name: string, v: number | undefined, dflt: number): number {
  const x = v ?? dflt;
  if (!(x >= 0 && x < Infinity)) throw new RangeError(`simulator option ${name} must be a finite number ≥ 0, got ${x}`);
  return x;
}

function rate(name: string, v: number | undefined): number {
  const x = v ?? 0;
  if (!(x >= 0 && x <= 1)) throw new RangeError(`simulator fault ${name} must be in [0, 1], got ${x}`);
  return x;
}

function limit(name: string, v: number | undefined): number | null {
  if (v === undefined) return null;
  if (!Number.isSafeInteger(v) || v <= 0) throw new RangeError(`simulator quota ${name} must be a positive integer, got ${v}`);
  return v;
}

function positiveInteger(name: string, v: number | undefined, dflt: number): number {
  const x = v ?? dflt;
  if (!Number.isSafeInteger(x) || x <= 0) throw new RangeError(`simulator option ${name} must be a positive integer, got ${x}`);
  return x;
}

/**
 * Applies defaults and checks ranges.
 * @throws RangeError when a delay or pace is negative or not finite, a rate is outside [0, 1],
 *   a quota or arrivalLogSize is not a positive integer, or defaultOutputTokens is not an integer.
 */
export function resolveSimulatorOptions(opts: SimulatorOptions = {}): ResolvedSimulatorOptions {
  const defaultOutputTokens = nonNegative('defaultOutputTokens', opts.defaultOutputTokens, 16);
  if (!Number.isSafeInteger(defaultOutputTokens)) throw new RangeError(`simulator option defaultOutputTokens must be an integer, got ${defaultOutputTokens}`);
  const f = opts.faults ?? {};
  return {
    ttftMs: nonNegative('ttftMs', opts.ttftMs, 0),
    tokensPerSecond: nonNegative('tokensPerSecond', opts.tokensPerSecond, 0),
    defaultOutputTokens,
    rpm: limit('rpm', opts.quota?.rpm),
    tpm: limit('tpm', opts.quota?.tpm),
    errorRate: rate('errorRate', f.errorRate),
    dropRate: rate('dropRate', f.dropRate),
    slowRate: rate('slowRate', f.slowRate),
    slowMs: nonNegative('slowMs', f.slowMs, 5_000),
    seed: opts.seed ?? 1,
    clock: opts.clock ?? systemClock,
    bedrockCredentials: opts.bedrockCredentials ?? [EXAMPLE_AWS_CREDENTIALS],
    arrivalLogSize: positiveInteger('arrivalLogSize', opts.arrivalLogSize, DEFAULT_ARRIVAL_LOG_SIZE),
  };
}

/**
 * The credentials `quotaring simulate` accepts: the documentation's example pair, and the pair in
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN) when set, so a gateway started
 * with the same environment signs requests the simulator accepts.
 */
export function simulatorAwsCredentials(env: NodeJS.ProcessEnv): AwsCredentials[] {
  const out: AwsCredentials[] = [EXAMPLE_AWS_CREDENTIALS];
  const { AWS_ACCESS_KEY_ID: id, AWS_SECRET_ACCESS_KEY: secret, AWS_SESSION_TOKEN: token } = env;
  if (id !== undefined && id !== '' && secret !== undefined && secret !== '' && id !== EXAMPLE_AWS_CREDENTIALS.accessKeyId) {
    out.push({ accessKeyId: id, secretAccessKey: secret, ...(token === undefined || token === '' ? {} : { sessionToken: token }) });
  }
  return out;
}

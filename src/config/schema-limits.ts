/**
 * One limit of a tenant, a key or a plan (`limits:` lists): requests, tokens, concurrency or cost,
 * with the rules that tie its fields to its kind.
 */
import { z } from 'zod';
import { isTimeZone } from '../limiter/budget-period.ts';
import { duration, positiveInt, usd } from './units.ts';

/** Calendar periods of a cost limit. */
export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
/** Longest window of a cost limit: 366 days, ms. */
const MAX_BUDGET_WINDOW_MS = 366 * 86_400_000;

/** Algorithms of a requests/tokens limit. */
export const ALGORITHMS = ['token_bucket', 'sliding_window'] as const;

/**
 * One limit. Exactly one of `requests`, `tokens`, `concurrent` or `usd`:
 * `{requests: 600, window: 1m}`, `{tokens: 200000, window: 1m, algorithm: sliding_window}`,
 * `{concurrent: 20, lease_ttl: 10m}`, `{usd: 50, window: 1d}`, `{usd: 1000, period: month,
 * time_zone: Europe/Paris}`; `model` scopes it to one model.
 */
export const LimitSchema = z
  .strictObject({
    requests: positiveInt.optional(),
    tokens: positiveInt.optional(),
    concurrent: positiveInt.optional(),
    /** A cost limit (a budget): US dollars of spend per window or calendar period (> 0). */
    usd: usd.optional(),
    /** Window of a requests/tokens limit, 1s ..= 1d; of a cost limit, 1s ..= 366d (fixed windows aligned to the Unix epoch). */
    window: duration.optional(),
    /** A cost limit's calendar period (instead of a window): starts at local midnight in `time_zone`; weeks start on Monday. */
    period: z.enum(BUDGET_PERIODS).optional(),
    /** IANA time zone of a calendar `period`. @default UTC */
    time_zone: z.string().refine(isTimeZone, 'time_zone: an IANA time zone such as UTC, Europe/Paris or America/New_York').optional(),
    /**
     * A tokens limit only: how much a cached input token, a cache-write token and a reasoning token
     * count at settlement (0 ..= 10; 1 = a full token). @default 1 each
     */
    weights: z
      .strictObject({
        cache_read: z.number().min(0).max(10).optional(),
        cache_write: z.number().min(0).max(10).optional(),
        reasoning: z.number().min(0).max(10).optional(),
      })
      .optional(),
    /** @default token_bucket */
    algorithm: z.enum(ALGORITHMS).optional(),
    /** TTL of a concurrency slot that is neither released nor renewed. @default 10m */
    lease_ttl: duration.optional(),
    model: z.string().min(1).optional(),
  })
  .superRefine((limit, ctx) => {
    const kinds = (['requests', 'tokens', 'concurrent', 'usd'] as const).filter((k) => limit[k] !== undefined);
    if (kinds.length !== 1) {
      ctx.addIssue({ code: 'custom', message: 'a limit sets exactly one of requests, tokens, concurrent or usd' });
      return;
    }
    if (limit.weights !== undefined && kinds[0] !== 'tokens') ctx.addIssue({ code: 'custom', path: ['weights'], message: 'weights apply to tokens limits only' });
    if (kinds[0] !== 'usd' && (limit.period !== undefined || limit.time_zone !== undefined)) {
      ctx.addIssue({ code: 'custom', path: [limit.period !== undefined ? 'period' : 'time_zone'], message: 'period and time_zone apply to cost (usd) limits only' });
    }
    if (kinds[0] === 'usd') {
      if (limit.usd === 0) ctx.addIssue({ code: 'custom', path: ['usd'], message: 'usd: a budget above 0' });
      if (limit.algorithm !== undefined || limit.lease_ttl !== undefined) ctx.addIssue({ code: 'custom', message: 'a cost (usd) limit takes no algorithm or lease_ttl' });
      if ((limit.window === undefined) === (limit.period === undefined)) {
        ctx.addIssue({ code: 'custom', path: ['window'], message: 'a cost (usd) limit needs either a window (e.g. 1d, 30d) or a calendar period (day, week, month)' });
      } else if (limit.window !== undefined && (limit.window < 1_000 || limit.window > MAX_BUDGET_WINDOW_MS || !Number.isInteger(limit.window))) {
        ctx.addIssue({ code: 'custom', path: ['window'], message: 'the window of a cost limit must be a whole number of ms from 1s to 366d' });
      }
      if (limit.time_zone !== undefined && limit.period === undefined) ctx.addIssue({ code: 'custom', path: ['time_zone'], message: 'time_zone applies to a calendar period (period: day, week or month); windows are aligned to the Unix epoch' });
      return;
    }
    if (kinds[0] === 'concurrent') {
      if (limit.window !== undefined || limit.algorithm !== undefined) {
        ctx.addIssue({ code: 'custom', message: 'a concurrent limit takes no window or algorithm' });
      }
      return;
    }
    if (limit.lease_ttl !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['lease_ttl'], message: 'lease_ttl applies to concurrent limits only' });
    }
    if (limit.window === undefined) {
      ctx.addIssue({ code: 'custom', path: ['window'], message: 'a requests or tokens limit needs a window (1s to 1d)' });
    } else if (limit.window < 1_000 || limit.window > 86_400_000 || !Number.isInteger(limit.window)) {
      ctx.addIssue({ code: 'custom', path: ['window'], message: 'window must be a whole number of ms from 1s to 1d' });
    }
  });

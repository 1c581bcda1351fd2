/**
 * The `priorities:` section: the priority tiers requests are admitted by, highest first, and the
 * default tiers when the section is left out.
 */
import { z } from 'zod';
import { duration } from './units.ts';

/**
 * A priority tier. Tiers are listed highest first. A request of a tier with a `floor` may not take
 * the last `floor` fraction of any requests or tokens limit of its tenant (that part is kept for
 * higher tiers); a refused request waits in its tenant's queue up to `max_wait` (0: an immediate 429).
 */
export const PrioritySchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9._-]{1,32}$/, 'tier name: 1-32 of A-Z a-z 0-9 . _ -'),
  /** Fraction (0 ≤ floor < 1) of each requests/tokens limit this tier leaves to higher tiers. @default 0 */
  floor: z.number().min(0, 'floor: a fraction from 0 up to (not including) 1, e.g. 0.2').lt(1, 'floor: a fraction from 0 up to (not including) 1, e.g. 0.2').default(0),
  /** Longest wait in the tenant's queue, ms; 0 = refused at once. @default 0 */
  max_wait: duration.default(0),
});

/** Default tiers: interactive first (never waits, no floor), then batch (keeps 20% for interactive, waits up to 60 s). */
export const DEFAULT_PRIORITIES = [
  { name: 'interactive', floor: 0, max_wait: 0 },
  { name: 'batch', floor: 0.2, max_wait: 60_000 },
] as const;

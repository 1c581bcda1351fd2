/**
 * How a node's hot-tenant detection is wired to its limiter and the hot set: what a tenant used
 * (read when it is spread), charging a cooled tenant's usage back to its owner, and the owner's
 * detector that promotes a tenant (global cap seeded, then the hot set marked) and refreshes it.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Clock } from '../clock.ts';
import { limitName } from '../config/policy.ts';
import type { TenantConfig } from '../config/schema.ts';
import type { HotSet } from '../coord/hot/hot-set.ts';
import type { Limiter } from '../limiter/limiter.ts';
import { HotDetector } from './hot-detector.ts';
import type { SpreadTenants } from './spread.ts';

/** Units used of each requests/tokens limit of `tenant` in `limiter` (config order): limit − remaining. */
export function limitUsage(limiter: Limiter, tenant: TenantConfig): number[] {
  return tenant.limits
    .filter((l) => l.concurrent === undefined)
    .map((l) => {
      const name = limitName(l);
      const state = limiter.peek(tenant.id, l.model).find((s) => s.name === name);
      return state === undefined ? 0 : Math.max(0, state.limit - state.remaining);
    });
}

/** Charges a cooled tenant's usage (read from the global cap) to the owner's limiter: one acquire, settled and released at once. */
export function seedUsage(limiter: Limiter, tenant: string, used: { readonly requests: number; readonly tokens: number }, clock: Clock, log: FastifyBaseLogger): void {
  const id = `seed-${clock.now()}`;
  const r = limiter.acquire(tenant, { id, requests: used.requests, tokens: used.tokens });
  if (!r.ok) {
    log.warn({ tenant, used, refused: r.limit }, 'cooled hot tenant: its usage could not be charged to the owner\'s limiter');
    return;
  }
  limiter.settle(tenant, id, used.tokens);
  limiter.release(tenant, id);
  log.info({ tenant, used }, 'hot tenant cooled: back on its owner with its usage from the global cap');
}

/** The owner's hot detection: promotes by seeding the global cap then marking the hot set; refreshes while hot. */
export function hotDetector(
  set: HotSet,
  spread: SpreadTenants,
  o: { readonly thresholdRps: number; readonly k: number; readonly sustainMs: number; readonly cooldownMs: number },
  clock: Clock,
  log: FastifyBaseLogger,
): HotDetector {
  return new HotDetector({
    clock,
    thresholdRps: o.thresholdRps,
    sustainMs: o.sustainMs,
    refreshMs: o.cooldownMs / 3,
    promote: async (tenant) => {
      if (!(await spread.promote(tenant, o.k, o.cooldownMs))) throw new Error('the global cap could not take the tenant\'s usage');
      log.info({ tenant, k: o.k, thresholdRps: o.thresholdRps }, 'hot tenant: spread over k nodes');
    },
    refresh: (tenant) => set.mark(tenant, o.k, o.cooldownMs),
  });
}

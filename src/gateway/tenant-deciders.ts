/**
 * How admission decides a tenant's limits, as a value: one {@link TenantDecider} per way a tenant
 * is decided — in this node's limiter on its owner, with its priority queue (`local`); a hot tenant
 * spread over several nodes, its requests and tokens on the group's leases and its slot here
 * (`spread`); every limit in Redis (`central`). {@link deciderOf} chooses one per request; the
 * admission stage (`admission.ts`) calls it and branches on no mode. What happens to a reservation
 * once admitted is `reservations.ts`'s.
 */
import type { FastifyReply } from 'fastify';
import type { CentralDecisions } from '../central/decisions.ts';
import type { CapLeases } from '../globalcap/cap-leases.ts';
import type { AcquireRequest, AcquireResult, LimitState } from '../limiter/types.ts';
import type { AdmitOutcome } from './admission-queue.ts';
import type { GatewayContext } from './context.ts';
import { sendMisdirected } from './ownership.ts';
import { giveBackDeploymentQuota, takeDeploymentQuota, takeLeased } from './quota-take.ts';
import { sendQuotaRefusal, sendRefusal, sendShareRefusal, sendUnavailable } from './refusals.ts';
import type { Answered, RequestRun } from './request.ts';
import { staysOnOwner } from './spend.ts';
import type { SpreadTenants } from './spread.ts';

/** What one admission asks of the tenant's decider. */
export interface Want {
  /** The reservation's id. */
  readonly id: string;
  /** Tokens reserved: prompt + reserved output. */
  readonly cost: number;
  /** Units of the requests limits (0 or 1). */
  readonly requests: number;
  /** What every acquire asks besides its tokens: its model, key and money. */
  readonly asked: Pick<AcquireRequest, 'requests' | 'model' | 'key' | 'cost'>;
  /** Money reserved from the tenant's and key's cost limits, pico-dollars. */
  readonly money: bigint;
  /** The primary deployment's quota leases when the request takes from them (undefined: none). */
  readonly quotas: CapLeases | undefined;
  /** The node's leases of the global caps (deployment quotas and spread groups), when there are any. */
  readonly leases: CapLeases | undefined;
  /** Redis unavailable refuses a take from the leases (`cluster.on_redis_failure: closed`). */
  readonly closed: boolean;
  /** How long it may still wait in its tenant's queue, ms: its tier's `max_wait` less what it waited for its fair share. */
  readonly maxWaitMs: number;
}

/** The tenant's limits decided: the result, whether the deployment quota taken is still the request's, and its queue wait (ms). */
export interface Decided {
  readonly kind: 'decided';
  readonly result: AcquireResult;
  readonly quotaHeld: boolean;
  readonly waitedMs: number;
}

/** One way of deciding a tenant at admission. */
export interface TenantDecider {
  readonly kind: 'local' | 'spread' | 'central';
  /** The 421 answer when another member decides the tenant now; undefined when this node decides it. */
  misdirected(run: RequestRun): Promise<FastifyReply> | undefined;
  /** Counts the request for hot-tenant detection (on the tenant's owner, or a spread tenant's node that owns it). */
  observe(run: RequestRun): void;
  /**
   * Takes the tenant's leased share before its limits (a spread tenant's group); refused, the
   * deployment quota taken is given back and the request answered.
   * @returns the global-cap group taken from (undefined: none).
   */
  takeShare(run: RequestRun, w: Want): Promise<{ readonly kind: 'share'; readonly group: string | undefined } | Answered>;
  /** Decides the tenant's limits; answered when they cannot be decided, the client left or the tenant moved while queued. */
  acquire(run: RequestRun, w: Want): Promise<Decided | Answered>;
  /** Limit states kept outside this node's limiter, shown before the tenant's own (a spread group's). */
  extraLimits(group: string | undefined): readonly LimitState[];
  /** After an admission: marks the tenant for the next checkpoint where this node keeps its state. */
  admitted(run: RequestRun): void;
}

const NO_LIMITS: readonly LimitState[] = [];
const NO_SHARE = { kind: 'share', group: undefined } as const;

/** The decider of `tenant` now: central in central mode, spread for a spread tenant, else local. */
export function deciderOf(ctx: GatewayContext, tenant: string): TenantDecider {
  if (ctx.central !== undefined) return centralDecider(ctx.central);
  const spread = ctx.spread;
  if (spread?.isSpread(tenant) === true) return spreadDecider(spread);
  return localDecider;
}

/** The tenant's owner decides in RAM; a refusal may wait in the tenant's queue (tiers with `max_wait`). */
const localDecider: TenantDecider = {
  kind: 'local',
  misdirected({ ctx, request, reply, ex }) {
    // The tenant moved away while this request was being read and counted: never decide it here.
    const handoff = ctx.handoff;
    if (handoff === undefined || handoff.holds(ex.tenant.id)) return undefined;
    return sendMisdirected(request, reply, handoff, ex.tenant.id, handoff.ring().owner(ex.tenant.id));
  },
  observe({ ctx, ex }) {
    if (ctx.hot !== undefined && !staysOnOwner(ex.tenant)) ctx.hot.observe(ex.tenant.id);
  },
  takeShare: async () => NO_SHARE,
  async acquire(run, w) {
    const { ctx, request, reply, ex, trail } = run;
    const tenantId = ex.tenant.id;
    const { id, cost, asked, quotas } = w;
    const tier = ex.tier;
    const handoff = ctx.handoff;
    let quotaHeld = quotas !== undefined;
    let waitedMs = 0;
    const giveBack = (): void => {
      if (quotaHeld && ctx.quotas !== undefined) giveBackDeploymentQuota(ctx.quotas, tenantId, ex.deployment.name, cost);
    };
    // A waiter woken on a node just back from a stall (its fence not caught up yet) is sent on like a
    // moved tenant's (421): its retry waits for the catch-up at the ownership check.
    const fence = ctx.fence;
    const attempt = (): AcquireResult | undefined =>
      (handoff !== undefined && !handoff.holds(tenantId)) || fence?.stale() === true ? undefined : ctx.limiter.acquire(tenantId, { id, tokens: cost, ...asked, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
    // When a waiter's deadline comes: how long a request like this one would still wait now.
    const hint = (): number => ctx.limiter.waitMs(tenantId, { tokens: cost, ...asked, ...(tier.floor > 0 ? { floor: tier.floor } : {}) });
    const decided = ctx.queues.admit(tenantId, tier.rank, w.maxWaitMs, attempt, hint);
    let outcome: AdmitOutcome;
    if (decided.kind === 'waiting') {
      // It waits: the deployment quota it took goes back meanwhile, and a client that leaves takes it out of the queue.
      giveBack();
      quotaHeld = false;
      reply.raw.on('close', decided.leave);
      try {
        outcome = await decided.done;
      } finally {
        reply.raw.off('close', decided.leave);
      }
      if (outcome.kind === 'admitted' && quotas !== undefined && ctx.quotas !== undefined) {
        const taken = await takeDeploymentQuota(ctx.quotas, tenantId, ex.deployment.name, cost, true);
        quotaHeld = taken !== 'unavailable' && taken.ok;
        if (taken === 'unavailable' || !taken.ok) {
          // Admitted by the tenant's limits, not by the quota: the tenant gets its tokens and slot back.
          ctx.limiter.settle(tenantId, id, 0);
          ctx.limiter.release(tenantId, id);
          const refusal = taken === 'unavailable' ? sendUnavailable(reply, ex) : taken.overShare === undefined ? sendQuotaRefusal(ctx, reply, ex, taken.waitMs, cost) : sendShareRefusal(reply, ex, taken.waitMs, taken.overShare.waitMs);
          return { kind: 'answered', reply: refusal };
        }
      }
      if (outcome.kind !== 'gone' && outcome.kind !== 'moved') waitedMs = outcome.waitedMs;
    } else outcome = decided;
    if (outcome.kind === 'gone') {
      trail.result = 'gone';
      trail.clientGone = true;
      trail.waitMs = waitedMs;
      return { kind: 'answered', reply: reply.hijack() };
    }
    if (outcome.kind === 'moved') {
      giveBack();
      if (handoff !== undefined) return { kind: 'answered', reply: await sendMisdirected(request, reply, handoff, tenantId, handoff.ring().owner(tenantId)) };
      return { kind: 'answered', reply: sendUnavailable(reply, ex) };
    }
    if (outcome.kind !== 'admitted' && outcome.kind !== 'refused') {
      // Waited past its deadline, or found the queue full: the quota was given back when it queued.
      giveBack();
      return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, outcome.result, cost, { kind: outcome.kind, waitedMs: outcome.waitedMs }, w.money) };
    }
    return { kind: 'decided', result: outcome.result, quotaHeld, waitedMs };
  },
  extraLimits: () => NO_LIMITS,
  admitted({ ctx, ex }) {
    ctx.handoff?.touched(ex.tenant.id);
  },
};

/** The decider built for `source` (a context's spread set or central store: one each), built once. */
const built = new WeakMap<object, TenantDecider>();
function once(source: object, build: () => TenantDecider): TenantDecider {
  let decider = built.get(source);
  if (decider === undefined) {
    decider = build();
    built.set(source, decider);
  }
  return decider;
}

/** A spread tenant: its requests and tokens limits are its node's lease of the group's global-cap buckets (no floor, no queue); its slot is this node's. */
function spreadDecider(spread: SpreadTenants): TenantDecider {
  return once(spread, () => ({
    kind: 'spread',
    misdirected({ ctx, request, reply, ex }) {
      const placement = spread.placement(ex.tenant.id);
      if (ctx.handoff === undefined || placement.index >= 0) return undefined;
      return sendMisdirected(request, reply, ctx.handoff, ex.tenant.id, placement.members[0]);
    },
    observe({ ctx, ex }) {
      const tenantId = ex.tenant.id;
      // A found-hot tenant's share here × k.
      if (ctx.hot !== undefined && spread.isHot(tenantId) && spread.owns(tenantId)) ctx.hot.observeSpread(tenantId, spread.spreadOf(tenantId) ?? 1);
    },
    async takeShare({ ctx, reply, ex }, w) {
      const group = spread.group(ex.tenant.id, ex.model.name);
      if (w.leases === undefined || group === undefined) return { kind: 'share', group };
      const taken = await takeLeased(w.leases, group, w.cost, w.closed, w.requests);
      if (taken === 'unavailable' || !taken.ok) w.quotas?.refund(ex.deployment.name, { requests: 1, tokens: w.cost });
      if (taken === 'unavailable') return { kind: 'answered', reply: sendUnavailable(reply, ex) };
      if (!taken.ok) return { kind: 'answered', reply: sendRefusal(ctx, reply, ex, spread.refusal(group, taken.waitMs, { requests: w.requests, tokens: w.cost }), w.cost) };
      return { kind: 'share', group };
    },
    async acquire({ ctx, ex }, w) {
      return { kind: 'decided', result: ctx.limiter.acquire(ex.tenant.id, { id: w.id, tokens: w.cost, ...w.asked }), quotaHeld: w.quotas !== undefined, waitedMs: 0 };
    },
    extraLimits: (group) => (group === undefined ? NO_LIMITS : spread.limitStates(group)),
    admitted: () => {},
  }));
}

/** Central-store mode: every limit of every tenant in Redis; no owner, no spread, no queue. */
function centralDecider(central: CentralDecisions): TenantDecider {
  return once(central, () => ({
    kind: 'central',
    misdirected: () => undefined,
    observe: () => {},
    takeShare: async () => NO_SHARE,
    async acquire({ request, reply, ex }, w) {
      const tenantId = ex.tenant.id;
      const decided = await central.guard.run(() => central.limiter.acquire(tenantId, { id: w.id, tokens: w.cost, ...w.asked }));
      if (!decided.ok) {
        // The central store could not decide: never a rate-limit answer, and nothing charged.
        w.quotas?.refund(ex.deployment.name, { requests: 1, tokens: w.cost });
        request.log.warn({ tenant: tenantId, reason: decided.reason }, 'central store unavailable');
        return { kind: 'answered', reply: sendUnavailable(reply, ex) };
      }
      return { kind: 'decided', result: decided.value, quotaHeld: w.quotas !== undefined, waitedMs: 0 };
    },
    extraLimits: () => NO_LIMITS,
    admitted: () => {},
  }));
}

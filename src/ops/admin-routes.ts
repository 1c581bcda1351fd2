/**
 * Admin API routes (behind the bearer token of `buildAdminServer`), on nodes and routers:
 *
 * | route | node | router |
 * |---|---|---|
 * | `GET /admin/v1/tenants/:tenant` | usage and remaining per limit here | asks the tenant's owner (`askedNode`) |
 * | `POST /admin/v1/tenants/:tenant/spend` | changes a budget's spend (the owner only) | forwards to the tenant's owner (`askedNode`) |
 * | `GET /admin/v1/deployments/:name/shares` | the deployment's fair-share table on this node | — |
 * | `GET /admin/v1/ring[?tenant=]` | members, version, a tenant's owner | same, the router's view |
 * | `GET /admin/v1/hot` | spread tenants (config and found hot) | same |
 * | `POST /admin/v1/drain` | leaves the ring, hands its tenants over, keeps running | — |
 * | `POST /admin/v1/config/reload` | re-reads the config file | same |
 */
import type { FastifyInstance } from 'fastify';
import { sendError } from '../error-reply.ts';
import type { DeploymentShareView } from '../fairshare/shares.ts';
import type { TenantFairShare } from './fair-share-report.ts';
import { request as httpRequest } from 'undici';
import type { LoadedConfig } from '../config/load.ts';
import type { ReloadableConfig } from '../config/reloadable.ts';
import type { HotSet } from '../coord/hot/hot-set.ts';
import type { Ring } from '../coord/types.ts';
import type { LimitState } from '../limiter/types.ts';
import { adminError } from './admin-server.ts';
import type { RequestSigner } from '../security/request-signature.ts';
import { formatMicros } from '../pricing/usd.ts';
import type { BudgetUsage, ForwardedSpend, SpendAnswer, SpendChanged, SpendRequester, UsdAmounts } from './spend-admin.ts';

/**
 * One limit of a tenant for operators: `used` = limit − remaining (requests, tokens, slots, or
 * micro-dollars); a cost limit also in US dollars (`usd`: decimal strings, six places; `spent` is
 * the period's exact spend rounded up, which may pass the limit), with its key (or null), model (or
 * null), and its current period (see `BudgetUsage`).
 */
export interface LimitUsage extends LimitState {
  readonly used: number;
  readonly usd?: UsdAmounts;
  readonly key?: string | null;
  readonly model?: string | null;
  readonly periodStart?: string;
  readonly resetsAt?: string;
}

/** `GET /admin/v1/tenants/:tenant`. `limits` is empty where this node does not decide for the tenant (`here: false`; `owner` names who does). */
export interface TenantUsage {
  readonly tenant: string;
  readonly node: string;
  readonly here: boolean;
  readonly owner: string | null;
  /** Present (true) on a node that is not the owner but holds the tenant in its place (a router routes around the owner); `limits` are then this node's. */
  readonly standIn?: true;
  readonly limits: readonly LimitUsage[];
  readonly queued: number;
  /**
   * On a node with fair-shared deployments: the tenant's demand, share and used per bucket kind of
   * each one it asks on this node (units per 60 s window, as this node sees them; any node where the
   * tenant asks, owner or not).
   */
  readonly fair_share?: readonly TenantFairShare[];
}

/**
 * Limit states with their usage; a cost limit with its budget from `budgets` (by name). A cost limit
 * without one keeps the `usd` it carries (a node's answer read by a router), else gets one from its
 * limit and remaining.
 */
export function withUsage(limits: readonly (LimitState | LimitUsage)[], budgets: readonly BudgetUsage[] = []): LimitUsage[] {
  return limits.map((l) => {
    const used = Math.max(0, l.limit - l.remaining);
    if (l.kind !== 'cost') return { ...l, used };
    const b = budgets.find((x) => x.name === l.name);
    if (b !== undefined) return { ...l, used, key: b.key, model: b.model, usd: b.usd, periodStart: b.periodStart, resetsAt: b.resetsAt, resetMs: b.resetMs };
    if ('usd' in l && l.usd !== undefined) return { ...l, used };
    return { ...l, used, usd: { limit: formatMicros(l.limit), spent: formatMicros(used), remaining: formatMicros(l.remaining) } };
  });
}

/** A tenant spread over `k` nodes now: by its config (`spread: k`) or found hot by its owner (the hot set). */
export interface SpreadTenant {
  readonly tenant: string;
  readonly k: number;
  readonly source: 'config' | 'detected';
}

/**
 * Spread tenants now: configured ones first (config order), then those in the hot set (`hot`,
 * absent when hot detection is off) with their k, or `cluster.hot.spread` when the entry has none.
 */
export function hotTenants(config: LoadedConfig, hot: HotSet | undefined): SpreadTenant[] {
  const out: SpreadTenant[] = [];
  for (const t of config.config.tenants) if (t.spread !== undefined) out.push({ tenant: t.id, k: t.spread, source: 'config' });
  for (const tenant of hot?.hot() ?? []) {
    if (!out.some((o) => o.tenant === tenant)) out.push({ tenant, k: hot?.spreadOf(tenant) ?? config.config.cluster.hot.spread, source: 'detected' });
  }
  return out;
}

function ringView(ring: Ring, tenant: string | undefined): Record<string, unknown> {
  return {
    version: ring.version,
    members: ring.members.map((m) => ({ id: m.id, url: m.url })),
    ...(tenant === undefined ? {} : { tenant, owner: ring.owner(tenant)?.id ?? null }),
  };
}

/** What both kinds of process share: the config to reload, the ring, the hot set. */
interface CommonSources {
  /** `node-…` or `router-…`. */
  readonly self: string;
  readonly config: ReloadableConfig;
  /** The ring this process sees (undefined: a single node, which owns every tenant). */
  ring(): Ring | undefined;
  /** The cluster's hot set, when hot detection is on. */
  readonly hot?: HotSet;
  /** Told after a successful reload (the process logs it). */
  reloaded?(changed: readonly string[]): void;
}

function commonRoutes(admin: FastifyInstance, s: CommonSources): void {
  admin.get<{ Querystring: { tenant?: string } }>('/admin/v1/ring', async (request) => {
    const ring = s.ring();
    const tenant = request.query.tenant;
    if (ring === undefined) return { self: s.self, version: null, members: [{ id: s.self, url: null }], ...(tenant === undefined ? {} : { tenant, owner: s.self }) };
    return { self: s.self, ...ringView(ring, tenant) };
  });
  admin.get('/admin/v1/hot', async () => ({ self: s.self, hot: hotTenants(s.config, s.hot) }));
  admin.post('/admin/v1/config/reload', async (request, reply) => {
    const result = s.config.reload();
    if (!result.ok) {
      request.log.warn({ problems: result.problems }, 'config reload refused: keeping the last good config');
      return reply.code(422).send({ ...adminError(`The config was not reloaded; the last good config stays. ${result.problems.join('; ')}`, 'invalid_config'), problems: result.problems });
    }
    request.log.info({ file: s.config.file, tenantsChanged: result.tenantsChanged, modelsChanged: result.modelsChanged, prioritiesChanged: result.prioritiesChanged }, 'config reloaded');
    s.reloaded?.(result.tenantsChanged);
    return { self: s.self, file: s.config.file, ...result };
  });
}

/** A node's admin sources. */
export interface NodeAdminSources extends CommonSources {
  /** The tenant's usage, or undefined for a tenant not in the config. */
  tenant(tenant: string): Promise<TenantUsage | undefined>;
  /**
   * Leaves the ring and hands every tenant over; the node keeps running and answers 421 for its
   * former tenants. @returns tenants handed over. @throws Error when the node cannot leave (static members).
   */
  drain(): Promise<{ readonly handedOff: number; readonly ring: string }>;
  /** Applies a spend change (`POST /admin/v1/tenants/:tenant/spend`, body unchecked) when this node owns the tenant. */
  changeSpend(tenant: string, body: unknown, who: SpendRequester): Promise<SpendAnswer>;
  /** A fair-shared deployment's table on this node, or undefined for a deployment not shared fairly (or unknown). */
  deploymentShares(deployment: string): DeploymentShareView | undefined;
}

/** Registers the node's admin routes. */
export function nodeAdminRoutes(admin: FastifyInstance, s: NodeAdminSources): void {
  commonRoutes(admin, s);
  admin.get<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant', async (request, reply) => {
    const usage = await s.tenant(request.params.tenant);
    return usage ?? reply.code(404).send(adminError(`No tenant ${request.params.tenant} in the config.`, 'not_found'));
  });
  admin.post<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant/spend', async (request, reply) => {
    const answer = await s.changeSpend(request.params.tenant, request.body, { remote: request.ip });
    return reply.code(answer.status).send(answer.body);
  });
  admin.get<{ Params: { name: string } }>('/admin/v1/deployments/:name/shares', async (request, reply) => {
    const view = s.deploymentShares(request.params.name);
    return view ?? sendError(reply, 'openai', 'not_found', { message: `No fair-shared deployment ${request.params.name} on this node.` });
  });
  let draining: Promise<{ readonly handedOff: number; readonly ring: string }> | undefined;
  admin.post('/admin/v1/drain', async (request, reply) => {
    const first = draining === undefined;
    draining ??= s.drain();
    try {
      const done = await draining;
      if (first) request.log.info({ handedOff: done.handedOff, ring: done.ring }, 'drained: out of the ring, tenants handed over');
      return { self: s.self, drained: true, alreadyDrained: !first, ...done };
    } catch (err) {
      draining = undefined;
      return reply.code(409).send(adminError((err as Error).message, 'cannot_drain'));
    }
  });
}

/** A router's admin sources. */
export interface RouterAdminSources extends CommonSources {
  /** Signs the router's reads of a tenant's usage on its owner. */
  readonly signer: RequestSigner;
}

/** A node's answer to a router's call, with its status. */
interface OwnerAnswer {
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly owner: string;
}

/**
 * Calls `path` (an internal route) on `tenant`'s owner under the router's ring, signed with the
 * cluster secret; `body` is sent as JSON (a POST), else a GET.
 * @returns the owner's answer, or an admin error to send: 404 for a tenant not in the config, 503
 *   for an empty ring, 502 when the owner does not answer within 2 s.
 */
async function askOwner(s: RouterAdminSources, tenant: string, path: string, body?: unknown): Promise<OwnerAnswer | { readonly status: number; readonly error: ReturnType<typeof adminError> }> {
  if (!s.config.policies.has(tenant)) return { status: 404, error: adminError(`No tenant ${tenant} in the config.`, 'not_found') };
  const owner = s.ring()?.owner(tenant);
  if (owner === undefined) return { status: 503, error: adminError('The ring is empty: no node decides for this tenant now.', 'no_healthy_node') };
  try {
    const url = new URL(`${owner.url.replace(/\/+$/, '')}${path}`);
    const text = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = text === undefined ? {} : { 'content-type': 'application/json' };
    const method = text === undefined ? 'GET' : 'POST';
    const res = await httpRequest(url, { method, headers: { ...headers, ...s.signer.signInternal(method, url, headers, text ?? '') }, ...(text === undefined ? {} : { body: text }), headersTimeout: 2_000, bodyTimeout: 2_000 });
    return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown>, owner: owner.id };
  } catch (err) {
    return { status: 502, error: adminError(`The tenant's owner ${owner.id} did not answer: ${(err as Error).message}`, 'upstream_unavailable') };
  }
}

/**
 * Registers the router's admin routes; a tenant's usage is read from its owner (`GET /_quotaring/v1/tenants/:tenant`,
 * signed), and a spend change is applied there (`POST /_quotaring/v1/tenants/:tenant/spend`, signed; logged here too).
 */
export function routerAdminRoutes(admin: FastifyInstance, s: RouterAdminSources): void {
  commonRoutes(admin, s);
  admin.get<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant', async (request, reply) => {
    const tenant = request.params.tenant;
    const answer = await askOwner(s, tenant, `/_quotaring/v1/tenants/${encodeURIComponent(tenant)}`);
    if ('error' in answer) return reply.code(answer.status).send(answer.error);
    const limits = (answer.body.limits ?? []) as LimitState[];
    return reply.code(answer.status).send({ ...answer.body, askedNode: answer.owner, limits: withUsage(limits) });
  });
  admin.post<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant/spend', async (request, reply) => {
    const tenant = request.params.tenant;
    const forwarded: ForwardedSpend = { change: request.body, admin: { remote: request.ip, via: s.self } };
    const answer = await askOwner(s, tenant, `/_quotaring/v1/tenants/${encodeURIComponent(tenant)}/spend`, forwarded);
    if ('error' in answer) return reply.code(answer.status).send(answer.error);
    if (answer.status === 200) {
      const b = answer.body as Partial<SpendChanged>;
      request.log.info({ tenant, key: b.key ?? null, limit: b.limit, op: b.op, amountUsd: b.amountUsd, spentBefore: b.spentBefore, spentAfter: b.spentAfter, admin: request.ip, askedNode: answer.owner }, 'budget spend changed on the owner');
    }
    return reply.code(answer.status).send({ ...answer.body, askedNode: answer.owner });
  });
}

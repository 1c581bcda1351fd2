/**
 * Admin API routes (behind the bearer token of `buildAdminServer`), on nodes and routers:
 *
 * | route | node | router |
 * |---|---|---|
 * | `GET /admin/v1/tenants/:tenant` | usage and remaining per limit here | asks the tenant's owner (`askedNode`) |
 * | `GET /admin/v1/ring[?tenant=]` | members, version, a tenant's owner | same, the router's view |
 * | `GET /admin/v1/hot` | spread tenants (config and found hot) | same |
 * | `POST /admin/v1/drain` | leaves the ring, hands its tenants over, keeps running | — |
 * | `POST /admin/v1/config/reload` | re-reads the config file | same |
 */
import type { FastifyInstance } from 'fastify';
import { request as httpRequest } from 'undici';
import type { LoadedConfig } from '../config/load.ts';
import type { ReloadableConfig } from '../config/reloadable.ts';
import type { HotSet } from '../coord/hot-set.ts';
import type { Ring } from '../coord/types.ts';
import type { LimitState } from '../limiter/types.ts';
import { adminError } from './admin-server.ts';
import type { RequestSigner } from '../security/request-signature.ts';
import { formatMicros } from '../pricing/usd.ts';

/**
 * One limit of a tenant for operators: `used` = limit − remaining (requests, tokens, slots, or
 * micro-dollars); a cost limit also in US dollars (`usd`: decimal strings, six places).
 */
export interface LimitUsage extends LimitState {
  readonly used: number;
  readonly usd?: { readonly limit: string; readonly spent: string; readonly remaining: string };
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
}

/** A limit state with its usage. */
export function withUsage(limits: readonly LimitState[]): LimitUsage[] {
  return limits.map((l) => {
    const used = Math.max(0, l.limit - l.remaining);
    return l.kind === 'cost' ? { ...l, used, usd: { limit: formatMicros(l.limit), spent: formatMicros(used), remaining: formatMicros(l.remaining) } } : { ...l, used };
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
}

/** Registers the node's admin routes. */
export function nodeAdminRoutes(admin: FastifyInstance, s: NodeAdminSources): void {
  commonRoutes(admin, s);
  admin.get<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant', async (request, reply) => {
    const usage = await s.tenant(request.params.tenant);
    return usage ?? reply.code(404).send(adminError(`No tenant ${request.params.tenant} in the config.`, 'not_found'));
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

/** Registers the router's admin routes; a tenant's usage is read from its owner (`GET /_quotaring/v1/tenants/:tenant`, signed). */
export function routerAdminRoutes(admin: FastifyInstance, s: RouterAdminSources): void {
  commonRoutes(admin, s);
  admin.get<{ Params: { tenant: string } }>('/admin/v1/tenants/:tenant', async (request, reply) => {
    const tenant = request.params.tenant;
    if (!s.config.policies.has(tenant)) return reply.code(404).send(adminError(`No tenant ${tenant} in the config.`, 'not_found'));
    const owner = s.ring()?.owner(tenant);
    if (owner === undefined) return reply.code(503).send(adminError('The ring is empty: no node decides for this tenant now.', 'no_healthy_node'));
    try {
      const url = new URL(`${owner.url.replace(/\/+$/, '')}/_quotaring/v1/tenants/${encodeURIComponent(tenant)}`);
      const res = await httpRequest(url, { headers: s.signer.signInternal('GET', url, {}), headersTimeout: 2_000, bodyTimeout: 2_000 });
      const body = (await res.body.json()) as { limits?: LimitState[] } & Record<string, unknown>;
      return reply.code(res.statusCode).send({ ...body, askedNode: owner.id, limits: withUsage(body.limits ?? []) });
    } catch (err) {
      return reply.code(502).send(adminError(`The tenant's owner ${owner.id} did not answer: ${(err as Error).message}`, 'upstream_unavailable'));
    }
  });
}

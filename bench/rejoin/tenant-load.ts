/**
 * An open-loop load of many tenants at a fixed rate each: request n goes to tenant n mod T at
 * start + n / (T × rate), whatever the earlier answers, so a slow answer never slows the load (a
 * late timer is caught up at once, its lag recorded). Non-streaming short chat completions, the
 * body's `user` field naming the tenant (the simulator's arrival log reads it).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { MODEL } from '../lib/load.ts';

/** One tenant of the load. */
export interface LoadTenant {
  readonly id: string;
  readonly key: string;
}

/** One request as the load generator saw it. */
export interface SentRequest {
  /** Index into the tenants. */
  readonly tenant: number;
  /** When it left, ms since the epoch (fractional: `performance.timeOrigin + performance.now()`). */
  readonly sentAt: number;
  /** How late it left against its schedule, ms. */
  readonly lagMs: number;
  /** HTTP status; 0 for a connection error or a timeout. */
  status: number;
  /** `x-quotaring-error` of the answer (e.g. `rate_limit_exceeded`), or the client error's code for status 0 (e.g. `ECONNRESET`); null when none. */
  error: string | null;
  /** From leaving to the end of the body, ms; NaN while unanswered. */
  latencyMs: number;
}

/** Options of {@link startTenantLoad}. */
export interface TenantLoadOptions {
  /** Base URL of the router; requests go to `<url>/v1/chat/completions`. */
  readonly url: string;
  readonly tenants: readonly LoadTenant[];
  /** Requests a second per tenant. */
  readonly perTenantPerS: number;
  /** Longest wait for an answer's head and body, ms (status 0 past it). @default 60000 */
  readonly timeoutMs?: number;
  /**
   * Most connections to the router; requests beyond them wait in the client, their wait counted in
   * their latency (from the scheduled send). Unbounded, a stalled router is sent a new connection per
   * request and its accept queue overflows (ECONNRESET, connect timeouts). @default 256
   */
  readonly connections?: number;
}

/** A running load (see {@link startTenantLoad}). */
export interface TenantLoad {
  /**
   * Stops sending and resolves with every request sent, once each was answered (or timed out).
   * Idempotent.
   */
  stop(): Promise<SentRequest[]>;
}

/** Epoch ms with sub-ms precision, on the same clock as `Date.now()` (and the processes' log lines). */
export function epochNow(): number {
  return performance.timeOrigin + performance.now();
}

/** The body of a tenant's request: a 2-word prompt, 8 output tokens, `user` = the tenant id. */
export function tenantBody(tenantId: string): string {
  return JSON.stringify({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: 'hello there' }], user: tenantId });
}

/** Starts sending at once; see the module comment. */
export function startTenantLoad(opts: TenantLoadOptions): TenantLoad {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const agent = new Agent({ connections: opts.connections ?? 256, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  const bodies = opts.tenants.map((t) => tenantBody(t.id));
  const intervalMs = 1_000 / (opts.tenants.length * opts.perTenantPerS);
  const sent: SentRequest[] = [];
  const pending = new Set<Promise<void>>();
  let stopped = false;

  const send = (tenant: number, lagMs: number): void => {
    const t = opts.tenants[tenant] as LoadTenant;
    const r: SentRequest = { tenant, sentAt: epochNow(), lagMs, status: 0, error: null, latencyMs: Number.NaN };
    const t0 = performance.now();
    sent.push(r);
    const p = (async () => {
      try {
        const res = await request(`${opts.url}/v1/chat/completions`, {
          method: 'POST',
          dispatcher: agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${t.key}` },
          body: bodies[tenant] as string,
        });
        await res.body.dump();
        r.status = res.statusCode;
        const err = res.headers['x-quotaring-error'];
        r.error = typeof err === 'string' ? err : null;
      } catch (err) {
        r.status = 0;
        r.error = (err as { code?: string }).code ?? (err as Error).message;
      }
      r.latencyMs = performance.now() - t0;
    })();
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };

  const loop = (async () => {
    const start = performance.now();
    for (let n = 0; !stopped; n++) {
      const due = start + n * intervalMs;
      const wait = due - performance.now();
      if (wait > 1) await sleep(wait);
      if (stopped) break;
      send(n % opts.tenants.length, Math.max(0, performance.now() - due));
    }
  })();

  let stopping: Promise<SentRequest[]> | undefined;
  return {
    stop: () =>
      (stopping ??= (async () => {
        stopped = true;
        await loop;
        await Promise.all([...pending]);
        await agent.close();
        return sent;
      })()),
  };
}

/**
 * Connections to the upstream deployments: one undici `Pool` per deployment with keep-alive
 * connections (as many as requests in flight unless the deployment's `connections` bounds them) and
 * the deployment's timeouts. A call's path goes below the base URL's path, and the
 * base URL's query string (Azure's `api-version`) is kept; the path below it and the headers that
 * carry the key are the provider's adapter's (`src/providers/adapters.ts`: Azure and Gemini drop the
 * `/v1`, Azure sends its key in `api-key`, Anthropic in `x-api-key`).
 */
import type { EventEmitter } from 'node:events';
import { Pool } from 'undici';
import type { Dispatcher } from 'undici';
import type { ResolvedDeployment } from '../config/load.ts';
import { adapterOf } from '../providers/adapters.ts';
import { signBedrockRequest } from '../providers/bedrock/sigv4.ts';

/** One upstream call. */
export interface UpstreamCall {
  /** Provider path, e.g. `/v1/chat/completions` (the base URL's path is prefixed). */
  readonly path: string;
  readonly body: string | Buffer;
  /** HTTP method; a GET or DELETE sends no body. @default 'POST' */
  readonly method?: 'GET' | 'POST' | 'DELETE';
  /** Extra request headers (forwarded client headers, `anthropic-version`, ...). */
  readonly headers: Record<string, string>;
  /** Aborts the call: an AbortSignal, or an EventEmitter that emits `abort` (cheaper; undici takes both). */
  readonly signal: AbortSignal | EventEmitter;
}

/** Pools per deployment; create once per process, `close()` on shutdown. */
export class Upstreams {
  readonly #pools = new Map<string, { pool: Pool; prefix: string; query: string; origin: string }>();

  /**
   * Sends a request (a POST unless `call.method` says) to a deployment; the body of the returned
   * response must be consumed or destroyed. A Bedrock deployment without an API key is signed with
   * SigV4 (its `aws` credentials), afresh for every attempt. @throws undici errors on connect
   * failure, timeout or abort.
   */
  async request(deployment: ResolvedDeployment, call: UpstreamCall): Promise<Dispatcher.ResponseData> {
    const { pool, prefix, query, origin } = this.#poolFor(deployment);
    const method = call.method ?? 'POST';
    let headers: Record<string, string> = { ...call.headers, 'accept-encoding': 'identity' };
    if (method === 'POST') headers['content-type'] = 'application/json';
    const adapter = adapterOf(deployment.provider);
    const base = prefix + adapter.upstreamPath(call.path);
    const path = query === '' ? base : `${base}${base.includes('?') ? '&' : '?'}${query.slice(1)}`;
    if (deployment.apiKey !== undefined) {
      Object.assign(headers, adapter.authHeaders(deployment.apiKey, deployment));
    } else if (deployment.aws !== undefined) {
      headers = await signBedrockRequest(deployment.aws, { origin, path, headers, body: call.body });
    }
    return pool.request({
      method,
      path,
      headers,
      body: method === 'POST' ? call.body : null,
      signal: call.signal,
      headersTimeout: deployment.headers_timeout,
      bodyTimeout: deployment.body_timeout,
    });
  }

  #poolFor(deployment: ResolvedDeployment): { pool: Pool; prefix: string; query: string; origin: string } {
    let entry = this.#pools.get(deployment.name);
    if (entry === undefined) {
      const url = new URL(deployment.base_url);
      entry = {
        pool: new Pool(url.origin, { connections: deployment.connections ?? null, keepAliveTimeout: 30_000, pipelining: 1 }),
        prefix: url.pathname.replace(/\/+$/, ''),
        query: url.search,
        origin: url.origin,
      };
      this.#pools.set(deployment.name, entry);
    }
    return entry;
  }

  /** Closes every pool, waiting for requests in flight. */
  async close(): Promise<void> {
    await Promise.all([...this.#pools.values()].map((e) => e.pool.close()));
    this.#pools.clear();
  }
}

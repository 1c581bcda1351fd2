/**
 * The simulator's arrival log, served by `GET /sim/arrivals`: each request received on a model
 * route, stamped with the simulator's clock when it arrived (before its body was read), with the
 * end user its body names, the key it carried and the status it was answered. Tests check
 * admission from where the provider sees the requests, not only from the client's side.
 *
 * A ring of the last `capacity` arrivals: one small object per request, its user and status
 * filled in when the reply ends.
 */
import type { ServerResponse } from 'node:http';
import type { Wire } from './provider-errors.ts';
import { isJsonObject } from './request-fields.ts';

/** Most characters of a user id kept (UTF-16 code units; a surrogate pair is not split). */
export const USER_CHARS = 128;

/** Arrivals kept by default: the last 200,000 (about 20 MB of JSON when served). */
export const DEFAULT_ARRIVAL_LOG_SIZE = 200_000;

/** One request as the simulator received it. */
export interface Arrival {
  /** When it arrived: the simulator's clock (ms since the epoch), before its body was read. */
  readonly at: number;
  /**
   * The end user the body names: OpenAI's `user`, Anthropic's `metadata.user_id` (a string,
   * clipped to {@link USER_CHARS}); null when absent, not a string, or the body was never read.
   */
  user: string | null;
  /** The status of the reply's head; 0 when the reply ended without one (the client left first); null while it has not ended. */
  status: number | null;
  /** The API key it carried ('' when none: answered 401). */
  readonly key: string;
  /** The W3C `traceparent` header it carried, as received (clipped to 256 characters); null when none. */
  readonly traceparent: string | null;
}

/** JSON body of `GET /sim/arrivals`. */
export interface ArrivalsSnapshot {
  /** Arrivals in the order they arrived (oldest first). */
  readonly arrivals: readonly Arrival[];
  /** Arrivals pushed out of the ring since the start or the last reset: when not 0, the log is not whole. */
  readonly evicted: number;
}

/** The last `capacity` arrivals, oldest overwritten first. */
export class ArrivalLog {
  readonly #capacity: number;
  #ring: Arrival[] = [];
  /** When the ring is full: the index of the oldest arrival (the next to be overwritten). */
  #oldest = 0;
  #evicted = 0;

  /** @throws RangeError when `capacity` is not a positive integer. */
  constructor(capacity: number = DEFAULT_ARRIVAL_LOG_SIZE) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`simulator option arrivalLogSize must be a positive integer, got ${capacity}`);
    this.#capacity = capacity;
  }

  /**
   * Logs a request that arrived at `at` (ms) with `key` (and `traceparent`, when it carried one); its
   * user and status are filled in later on the returned entry.
   */
  arrive(at: number, key: string, traceparent: string | null = null): Arrival {
    const entry: Arrival = { at, user: null, status: null, key, traceparent };
    if (this.#ring.length < this.#capacity) {
      this.#ring.push(entry);
    } else {
      this.#ring[this.#oldest] = entry;
      this.#oldest = (this.#oldest + 1) % this.#capacity;
      this.#evicted++;
    }
    return entry;
  }

  /** The arrivals at or after `sinceMs` (all when undefined), oldest first, and the eviction count. */
  snapshot(sinceMs?: number): ArrivalsSnapshot {
    const ring = this.#ring;
    const ordered = this.#oldest === 0 ? ring : [...ring.slice(this.#oldest), ...ring.slice(0, this.#oldest)];
    const arrivals = sinceMs === undefined ? ordered.slice() : ordered.filter((a) => a.at >= sinceMs);
    return { arrivals, evicted: this.#evicted };
  }

  /** Forgets every arrival (requests still running end outside the log). */
  reset(): void {
    this.#ring = [];
    this.#oldest = 0;
    this.#evicted = 0;
  }
}

/**
 * The end user a body names, by wire format: OpenAI's `user`, Anthropic's `metadata.user_id`;
 * Bedrock Converse has no such field. Clipped to {@link USER_CHARS}, copied so that a huge field
 * is not kept alive by the clip.
 */
export function userOf(wire: Wire, body: unknown): string | null {
  if (!isJsonObject(body)) return null;
  let user: unknown;
  if (wire === 'openai') user = body['user'];
  else if (wire === 'anthropic') user = isJsonObject(body['metadata']) ? body['metadata']['user_id'] : undefined;
  if (typeof user !== 'string') return null;
  if (user.length <= USER_CHARS) return user;
  const code = user.charCodeAt(USER_CHARS - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? USER_CHARS - 1 : USER_CHARS;
  // A slice of a long string can share (and keep) the whole string; a Buffer round trip copies it.
  return Buffer.from(user.slice(0, end), 'utf16le').toString('utf16le');
}

/**
 * Logs a request arriving now on a model route, with the `traceparent` it carried, and fills in its
 * user and status when `res` closes (completed, cut, or abandoned by the client).
 * @param req its headers, and its parsed body, read when the reply ends (undefined when it was never parsed).
 */
export function logArrival(log: ArrivalLog, at: number, key: string, wire: Wire, req: { readonly body?: unknown; readonly headers: Readonly<Record<string, string | string[] | undefined>> }, res: ServerResponse): void {
  const header = req.headers['traceparent'];
  const entry = log.arrive(at, key, typeof header === 'string' ? header.slice(0, 256) : null);
  res.once('close', () => {
    entry.user = userOf(wire, req.body);
    entry.status = res.headersSent ? res.statusCode : 0;
  });
}

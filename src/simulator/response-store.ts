/**
 * The simulator's stored Responses (`store` is true by default at OpenAI): what `GET /v1/responses/{id}`
 * returns and what `previous_response_id` continues. A response belongs to the API key that created
 * it (another key gets 404, as another organization would). A background response is queued, then
 * in progress, then final at its completion time on the simulator's clock; a cancel stops it.
 * Bounded: the oldest of more than {@link MAX_STORED_RESPONSES} are forgotten.
 */
import { LRUCache } from 'lru-cache';
import type { Clock } from '../clock.ts';
import type { InputItems } from './input-items.ts';

/** Most responses kept per simulator. */
export const MAX_STORED_RESPONSES = 20_000;

/** Token counts of a finished response, as its `usage` reports them. */
export interface StoredUsage {
  readonly input: number;
  readonly cached: number;
  /** Output tokens, reasoning included. */
  readonly output: number;
  readonly reasoning: number;
}

/** One stored response. */
export interface StoredResponse {
  readonly id: string;
  /** The API key that created it. */
  readonly key: string;
  readonly background: boolean;
  /** Clock ms from which it is final (its creation for a foreground response). */
  readonly completeAtMs: number;
  /** Its status once final: `completed`, or `incomplete` (cut by `max_output_tokens`, or a foreground stream cut short). */
  readonly finalStatus: 'completed' | 'incomplete';
  readonly usage: StoredUsage;
  /** The Response JSON at `status`, with its output and usage when `final`. */
  readonly render: (status: string, final: boolean) => string;
  /** Its input items' JSON, in request order (`GET /v1/responses/{id}/input_items`). */
  readonly inputItems: InputItems;
  /** Set by a cancel before it finished. */
  cancelled: boolean;
}

/** The responses of one simulator. */
export class ResponseStore {
  readonly #clock: Clock;
  readonly #responses = new LRUCache<string, StoredResponse>({ max: MAX_STORED_RESPONSES });

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Now on the simulator's clock, ms. */
  now(): number {
    return this.#clock.now();
  }

  /** Stores `r` under its id. */
  put(r: StoredResponse): void {
    this.#responses.set(r.id, r);
  }

  /** Response `id` of `key`, or undefined (unknown, deleted, or another key's). */
  get(id: string, key: string): StoredResponse | undefined {
    const r = this.#responses.get(id);
    return r !== undefined && r.key === key ? r : undefined;
  }

  /** Forgets response `id` of `key`. @returns whether it was there. */
  delete(id: string, key: string): boolean {
    if (this.get(id, key) === undefined) return false;
    return this.#responses.delete(id);
  }

  /** Whether `r` reached a final status (finished, or cancelled). */
  isFinal(r: StoredResponse): boolean {
    return r.cancelled || this.#clock.now() >= r.completeAtMs;
  }

  /** Status of `r` now: `cancelled`, its final status, or `in_progress` until its completion time. */
  statusOf(r: StoredResponse): string {
    if (r.cancelled) return 'cancelled';
    return this.#clock.now() >= r.completeAtMs ? r.finalStatus : 'in_progress';
  }
}

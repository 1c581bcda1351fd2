/**
 * What a node remembers of the Responses it relayed, by response id (RAM only, bounded, per
 * process): the tenant that created it, the deployment that holds it (a GET, a cancel or a
 * `previous_response_id` must reach that one), its context size for a later `previous_response_id`,
 * and — for a background response not finished when it was answered — the settlement still owed.
 * A tenant is served by one owner node, so its later calls find the entry there; a node that
 * restarted, or a tenant that moved, finds none: the GET then tries the deployments in order and
 * `previous_response_id` reserves the model's `stored_context_tokens`.
 */
import { LRUCache } from 'lru-cache';
import type { TokenUsage } from '../providers/types.ts';

/** Most response ids remembered per node (each entry is about 200 bytes). */
export const MAX_REMEMBERED_RESPONSES = 100_000;

/** One remembered response. */
export interface KnownResponse {
  /** The tenant that created it: another tenant's calls on the id get 404. */
  readonly tenant: string;
  /** The deployment that holds it. */
  readonly deployment: string;
  /** Its input + output tokens, once known: the prompt a `previous_response_id` naming it carries. */
  contextTokens: number | undefined;
  /** The settlement owed by a background response until it reports its usage; called once. */
  settle: ((actualTokens: number, usage?: TokenUsage) => void) | undefined;
}

/** The remembered responses of one node. */
export class ResponseIds {
  readonly #known = new LRUCache<string, KnownResponse>({ max: MAX_REMEMBERED_RESPONSES });

  /** Remembers response `id` (replacing what was known of it). */
  remember(id: string, entry: KnownResponse): void {
    this.#known.set(id, entry);
  }

  /** What is known of `id`, or undefined. */
  get(id: string): KnownResponse | undefined {
    return this.#known.get(id);
  }

  /**
   * A Response object of `id` was seen (a GET, a cancel, a background stream's end): when it is
   * final and reports its usage, the settlement owed (if any) is made, once, and its context
   * size recorded.
   * @param terminal whether its status is final. @returns whether a settlement was made.
   */
  observed(id: string, terminal: boolean, usage: TokenUsage | undefined): boolean {
    const entry = this.#known.get(id);
    if (entry === undefined || !terminal || usage === undefined) return false;
    entry.contextTokens = usage.input + usage.output;
    const settle = entry.settle;
    if (settle === undefined) return false;
    entry.settle = undefined;
    settle(usage.input + usage.output, usage);
    return true;
  }

  /** Responses remembered. */
  get size(): number {
    return this.#known.size;
  }
}

/** One registry per gateway context (per node). */
const registries = new WeakMap<object, ResponseIds>();

/** The registry of the node whose context is `ctx`. */
export function responseIdsOf(ctx: object): ResponseIds {
  let ids = registries.get(ctx);
  if (ids === undefined) {
    ids = new ResponseIds();
    registries.set(ctx, ids);
  }
  return ids;
}

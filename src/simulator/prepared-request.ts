/**
 * What a model route derives from a valid request before the quota and the reply: usage numbers
 * and the builders of its reply in the provider's wire format.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { PromptTokens } from './prompt-tokens.ts';
import type { JsonObject } from './request-fields.ts';
import type { ReplyOutcome, StreamPlan } from './reply-writer.ts';
import type { ResponseStore } from './response-store.ts';

/** Identity of one reply: `id` (e.g. `chatcmpl-sim1`) and `created` (Unix seconds). */
export interface ReplyIdentity {
  readonly id: string;
  readonly created: number;
}

/** A validated request, ready to be admitted and answered. */
export interface PreparedRequest {
  readonly model: string;
  /** Whether the reply is an SSE stream. */
  readonly stream: boolean;
  /** Exact prompt (input) tokens, as reported in usage. */
  readonly promptTokens: number;
  /** Completion tokens the reply carries (0 for embeddings). */
  readonly outputTokens: number;
  /** Completion tokens of one stream `unit` (one per choice when a unit carries a token of each). @default 1 */
  readonly tokensPerUnit?: number;
  /** Tokens charged at admission: prompt + the output cap (max_tokens when given, else the output length). */
  readonly reserveTokens: number;
  /** Output tokens generated but not streamed (reasoning), counted with what a stream sent. @default 0 */
  readonly hiddenOutputTokens?: number;
  /** Called once when the reply ends, with the output tokens it sent (the Responses API stores the response). */
  ended?(outcome: ReplyOutcome, sentTokens: number, ids: ReplyIdentity): void;
  /** The full JSON body of a non-stream reply. */
  json(ids: ReplyIdentity): string;
  /** The events of a stream reply. */
  plan(ids: ReplyIdentity): StreamPlan;
}

/** What preparing a request may use. */
export interface PrepareContext {
  readonly prompts: PromptTokens;
  /** Completion tokens when neither max_tokens nor x-sim-output-tokens says. */
  readonly defaultOutputTokens: number;
  /** Stored Responses (`previous_response_id`, GET by id) and the clock they are stamped with; none: nothing is stored. */
  readonly responses?: ResponseStore;
  /** The API key of the request. @default '' */
  readonly key?: string;
  /** The simulator's streaming pace, tokens per second (0: unpaced). @default 0 */
  readonly paceTokensPerSecond?: number;
}

/** Turns a JSON body whose `model` is valid into a PreparedRequest, or a 400 message. */
export type Prepare = (body: JsonObject, model: string, headers: IncomingHttpHeaders, ctx: PrepareContext) => PreparedRequest | { readonly message: string; readonly param: string | null };

/**
 * The request's contract: what a route hands the request pipeline (`Exchange`, the calls of its
 * deployments), the one value every stage takes (`RequestRun`, then `AdmittedRun` once admitted),
 * and what each stage hands the next — admission's `Admission`, the upstream attempt's
 * `UpstreamResponse` and `Served`, the relay's `Usage` — or `Answered` when a stage answered the
 * client and the stages after it do not run. Types only (and the empty `Usage`): every stage
 * imports this file, and no stage imports another (the pipeline is `exchange.ts`).
 */
import type { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import type { ResolvedDeployment, Tier } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import type { ErrorDialect } from '../errors.ts';
import type { CapLeases } from '../globalcap/cap-leases.ts';
import type { AcquireRequest } from '../limiter/types.ts';
import type { Span } from '../http/tracing.ts';
import type { RequestTrail } from '../ops/node-activity.ts';
import type { SseEvent } from '../providers/sse.ts';
import type { StreamObserver, TokenUsage } from '../providers/types.ts';
import type { GatewayContext } from './context.ts';
import type { SpreadTenants } from './spread.ts';

/** A stream of the other wire format, re-written in the client's: see `src/providers/translate`. */
export interface StreamTranslator {
  /** The client's SSE text for one upstream event ('' for none). */
  push(event: SseEvent): string;
  /** The client's SSE text that closes a finished stream. */
  end(): string;
}

/** How to call one deployment for this request, in the deployment's wire format. */
export interface DeploymentCall {
  /** Upstream provider path, e.g. `/v1/chat/completions`. */
  readonly path: string;
  readonly body: string | Buffer;
  /** Extra upstream headers (provider version headers). */
  readonly headers: Record<string, string>;
  /** Usage from the `usage` field of a JSON reply body. */
  readonly usageFromJson: (usage: unknown) => TokenUsage | undefined;
  /** A fresh stream observer, for SSE replies (of the deployment's format). */
  readonly observer: () => StreamObserver;
  /** Set when the deployment speaks the other wire format: its replies re-written in the client's. */
  readonly translate?: { json(text: string): string; stream(): StreamTranslator };
  /**
   * Set when the deployment streams something other than SSE (Bedrock's event stream, which is
   * always translated): the reply's content type and its decoder into events, in batches.
   */
  readonly framing?: { readonly contentType: string; events(body: AsyncIterable<Uint8Array>): AsyncIterable<readonly SseEvent[]> };
}

/** Everything a route knows about a request once it is parsed and counted; as a call, the primary deployment's. */
export interface Exchange extends DeploymentCall {
  readonly dialect: ErrorDialect;
  readonly tenant: TenantConfig;
  /** Priority tier of the request (its floor and longest queue wait). */
  readonly tier: Tier;
  readonly model: ModelConfig;
  readonly deployment: ResolvedDeployment;
  /** The model's other deployments, in order: a hard failure of one moves the request to the next. */
  readonly failover: readonly ResolvedDeployment[];
  /** The call of a failover deployment. @throws TranslationError when the request cannot be said in its format. */
  readonly callFor: (deployment: ResolvedDeployment) => DeploymentCall;
  /** Prompt tokens counted or estimated at admission. */
  readonly promptTokens: number;
  /** Output tokens reserved (max_tokens × n, or the model's default). */
  readonly reservedOutput: number;
  readonly stream: boolean;
  /**
   * Whether the request takes from its deployments' provider quotas (false for calls a provider
   * limits apart, such as Anthropic's count_tokens: no quota taken, a 429 drains none). @default true
   */
  readonly deploymentQuota?: boolean;
  /**
   * Units the request takes from the tenant's requests limits: 0 for a call that holds only a
   * concurrency slot and is charged nothing (`count_tokens: free`). @default 1
   */
  readonly requests?: 0 | 1;
  /**
   * Called once per request whose reply succeeded (2xx), after it was relayed, with the upstream's
   * JSON text (undefined for a stream). `settle` is given when the reply may not have reported its
   * usage (a JSON reply without it, any stream): the concurrency slot was released, and returning
   * true takes the settlement over — the reservation (and the deployment quota it holds) stays
   * until `settle(actualTokens)` is called, once the provider reports the usage (Responses
   * `background: true`, whose usage comes with a later GET). Returning false settles as usual.
   * Never given `settle` in central mode (one call settles and releases there). @default none
   */
  readonly onReply?: (text: string | undefined, settle: ((actualTokens: number, usage?: TokenUsage) => void) | undefined) => boolean;
}

/** A stage's end of the request: the client was answered (refused, failed, or gone); the stages after it do not run. */
export interface Answered {
  readonly kind: 'answered';
  readonly reply: FastifyReply;
}

/** An admitted request: its reservation, and what the later stages need of how it was taken. */
export interface Admission {
  readonly kind: 'admitted';
  /** The reservation's id, also the request id the client is told (`x-quotaring-request-id`). */
  readonly id: string;
  /** Tokens reserved: prompt + reserved output. */
  readonly cost: number;
  /** Money reserved from the tenant's and key's cost limits, at the primary deployment's prices (pico-dollars). */
  readonly money: bigint;
  /** The id of the API key the request came with (key-scoped limits and spend). */
  readonly keyId: string | undefined;
  /** What every acquire of this request asks besides its tokens: its model, key and money. */
  readonly asked: Pick<AcquireRequest, 'requests' | 'model' | 'key' | 'cost'>;
  /** Set when the tenant is spread: its slot is this node's, its requests and tokens on the group's leases. */
  readonly spread: SpreadTenants | undefined;
  /** The spread tenant's global-cap group the request took from (undefined: not spread). */
  readonly group: string | undefined;
  /** The node's leases of the global caps (deployment quotas and spread groups), when there are any. */
  readonly leases: CapLeases | undefined;
  /** The deployment whose provider quota the request holds (undefined: none). */
  readonly held: string | undefined;
  /** Redis unavailable refuses a take from the leases (`cluster.on_redis_failure: closed`). */
  readonly closed: boolean;
  /** The reply's headers so far: the tenant's limits after the decision, the request id, the time it queued. */
  readonly headers: Record<string, string>;
  /** The primary deployment's call (see `firstCall`): undefined when it is `ex` itself, null when only a failover deployment can take the request. */
  readonly first: DeploymentCall | null | undefined;
}

/** The deployment serving the request, its call, and the deployment whose quota the request holds: failover moves all three. */
export interface Served {
  deployment: ResolvedDeployment;
  call: DeploymentCall;
  held: string | undefined;
}

/** One deployment's answer: a response to relay, the client gone, or a failure to render or fail over from. */
export type CallOutcome =
  | {
      readonly kind: 'response';
      readonly res: Dispatcher.ResponseData;
      /** The body, when it was read already (a relayed 429). */
      readonly text: string | undefined;
      readonly relayedHeaders: Record<string, string>;
    }
  | { readonly kind: 'gone'; /** Output may have been produced: settle on the prompt. */ readonly delivered: boolean }
  | {
      readonly kind: 'failed';
      /** A failure another deployment may not share: no connection, a 5xx, a 429 after its retries. */
      readonly hard: boolean;
      readonly status: number;
      readonly reason: string;
      /** A 429's wait as the provider gave it, ms. */
      readonly waitMs?: number;
      /** Renders the failure; `later` (retry headers) replaces the provider's when the tenant must wait longer. */
      readonly send: (reply: FastifyReply, headers: Record<string, string>, later?: Record<string, string>) => FastifyReply;
    };

/** A deployment's response to relay to the client. */
export type UpstreamResponse = Extract<CallOutcome, { kind: 'response' }>;

/** What a request used, as the upstream attempt and the relay learn it; settled once, when the request ends. */
export interface Usage {
  /** Tokens to settle at the end; starts at 0, "refund everything" (upstream failure before any output). */
  tokens: number;
  /** The usage the provider reported (prices and weighs the settlement), when it did. */
  reported: TokenUsage | undefined;
  /** A success that reported no usage: the reserved cost stays charged. */
  unreported: boolean;
  /** A success: its upstream JSON text (undefined for a stream) and whether it reported usage, for `ex.onReply`. */
  succeeded: { readonly text: string | undefined; readonly reported: boolean } | undefined;
}

/** Nothing used yet: an upstream failure before any output refunds everything. */
export function nothingUsed(): Usage {
  return { tokens: 0, reported: undefined, unreported: false, succeeded: undefined };
}

/** One request on its way through the stages: what every stage reads. */
export interface RequestRun {
  readonly ctx: GatewayContext;
  readonly request: FastifyRequest;
  readonly reply: FastifyReply;
  readonly ex: Exchange;
  /** The request's log line and live counts, filled as it goes. */
  readonly trail: RequestTrail;
  /** The request's server span (`request-spans.ts`); undefined when tracing is off. */
  readonly span: Span | undefined;
}

/** An admitted request, from admission to settlement: the run, its reservation, and what the stages after admission fill. */
export interface AdmittedRun extends RequestRun {
  readonly admission: Admission;
  /** The deployment serving the request, its call, and the deployment whose quota it holds (failover moves all three). */
  readonly served: Served;
  /** What the request used, as the upstream attempt and the relay learn it. */
  readonly used: Usage;
  /** Set once the client left before its reply was finished. */
  readonly client: { readonly gone: boolean };
  /** Emits `abort` when the client leaves: the upstream call's abort signal. */
  readonly cancel: EventEmitter;
}

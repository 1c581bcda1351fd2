/**
 * The error catalogue: every error a client can get from quotaring, with a stable code, the HTTP
 * status, the provider error types it maps to, and a message that says how to fix it.
 * A unit test pins this list; README "Errors" explains each.
 */

/** Shape family of an error body: OpenAI routes or Anthropic's `/v1/messages`. */
export type ErrorDialect = 'openai' | 'anthropic';

/** One catalogue entry. */
export interface ErrorDef {
  /** HTTP status. */
  readonly status: number;
  /** OpenAI `error.type`. */
  readonly openaiType: string;
  /** Anthropic `error.type` (one of the types Anthropic documents). */
  readonly anthropicType: string;
  /** Default message; routes usually pass a more specific one. */
  readonly message: string;
}

/** Stable error codes. Never rename one: clients match on them. */
export const ERRORS = {
  invalid_api_key: {
    status: 401,
    openaiType: 'invalid_request_error',
    anthropicType: 'authentication_error',
    message: 'Missing or unknown API key. Send the tenant key as "Authorization: Bearer <key>" or "x-api-key: <key>".',
  },
  invalid_json: {
    status: 400,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'The request body is not valid JSON.',
  },
  invalid_encoding: {
    status: 400,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'The request body is not valid UTF-8.',
  },
  unsupported_media_type: {
    status: 415,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'Send the body as JSON with "Content-Type: application/json".',
  },
  body_too_large: {
    status: 413,
    openaiType: 'invalid_request_error',
    anthropicType: 'request_too_large',
    message: 'The request body is larger than the configured server.body_limit.',
  },
  headers_too_large: {
    status: 431,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'The request headers are larger than server.max_header_size or more than server.max_headers (router.* on routers).',
  },
  request_timeout: {
    status: 408,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'The request (headers or body) did not arrive within the server\'s headers_timeout / request_timeout; send it again without pausing.',
  },
  invalid_request: {
    status: 400,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'The request is missing a required field or has a field of the wrong type.',
  },
  model_not_found: {
    status: 404,
    openaiType: 'invalid_request_error',
    anthropicType: 'not_found_error',
    message: 'The model is not configured on this gateway. GET /v1/models lists the models you can use.',
  },
  wrong_endpoint: {
    status: 400,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'This model is served by a deployment of another provider; call it on that provider\'s endpoint.',
  },
  not_found: {
    status: 404,
    openaiType: 'invalid_request_error',
    anthropicType: 'not_found_error',
    message: 'No such route on this gateway.',
  },
  response_not_found: {
    status: 404,
    openaiType: 'invalid_request_error',
    anthropicType: 'not_found_error',
    message: 'No response with this id was created with this API key.',
  },
  rate_limit_exceeded: {
    status: 429,
    openaiType: 'requests',
    anthropicType: 'rate_limit_error',
    message: 'Rate limit reached. Retry after the time in the retry-after header.',
  },
  share_exhausted: {
    status: 429,
    openaiType: 'tokens',
    anthropicType: 'rate_limit_error',
    message: "This tenant's fair share of a deployment quota is used up while other tenants within their shares need the rest; retry after the time in the retry-after header.",
  },
  budget_exceeded: {
    status: 429,
    openaiType: 'insufficient_quota',
    anthropicType: 'rate_limit_error',
    message: 'The budget (a cost limit) of this tenant or key is spent until it renews; the message says when. An admin may raise it.',
  },
  request_too_large: {
    status: 429,
    openaiType: 'tokens',
    anthropicType: 'rate_limit_error',
    message: 'The request can never fit this limit: lower max_tokens or shorten the prompt.',
  },
  misdirected: {
    status: 421,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'This node does not own the tenant under its ring; send the request to the node named in x-quotaring-owner (routers do this themselves).',
  },
  not_owner: {
    status: 409,
    openaiType: 'invalid_request_error',
    anthropicType: 'invalid_request_error',
    message: 'This node does not own the tenant (or only stands in for it): nothing was changed. Ask its owner, or a router, which finds the owner itself.',
  },
  forward_loop: {
    status: 508,
    openaiType: 'server_error',
    anthropicType: 'api_error',
    message: 'A settlement forwarded between nodes passed more nodes than a ring change can explain; it was dropped.',
  },
  cluster_auth_failed: {
    status: 401,
    openaiType: 'invalid_request_error',
    anthropicType: 'authentication_error',
    message: 'Internal routes (/_quotaring/v1/*) answer only calls signed with the cluster secret (QUOTARING_CLUSTER_SECRET, the same in every node and router); clients call the router.',
  },
  upstream_unavailable: {
    status: 502,
    openaiType: 'server_error',
    anthropicType: 'api_error',
    message: 'The upstream provider could not be reached.',
  },
  upstream_timeout: {
    status: 504,
    openaiType: 'server_error',
    anthropicType: 'api_error',
    message: 'The upstream provider did not answer in time.',
  },
  limiter_unavailable: {
    status: 503,
    openaiType: 'server_error',
    anthropicType: 'overloaded_error',
    message: 'The cluster-wide limits cannot be checked right now (Redis unavailable) and this gateway is configured to refuse rather than fall back (cluster.on_redis_failure: closed); retry shortly.',
  },
  no_healthy_node: {
    status: 503,
    openaiType: 'server_error',
    anthropicType: 'overloaded_error',
    message: 'No gateway node is available for this tenant right now (none in the ring, or all failing health checks); retry shortly.',
  },
  node_starting: {
    status: 503,
    openaiType: 'server_error',
    anthropicType: 'overloaded_error',
    message: 'This gateway node has not joined its cluster yet (it waits for Redis membership; see its /readyz) and decides for no tenant until then; retry shortly, through a router.',
  },
  internal_error: {
    status: 500,
    openaiType: 'server_error',
    anthropicType: 'api_error',
    message: 'Internal gateway error.',
  },
} as const satisfies Record<string, ErrorDef>;

/** A stable error code from {@link ERRORS}. */
export type ErrorCode = keyof typeof ERRORS;

/**
 * A client-facing error: thrown by request parsing and caught by the gateway's error handler,
 * which renders it in the route's dialect. Never used for "rate limited" decisions, which are results.
 */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  /** OpenAI `error.param`: the offending field, when there is one. */
  readonly param: string | null;

  /** @param code catalogue code; @param message specific message (defaults to the catalogue's). */
  constructor(code: ErrorCode, message?: string, param: string | null = null) {
    super(message ?? ERRORS[code].message);
    this.code = code;
    this.statusCode = ERRORS[code].status;
    this.param = param;
  }
}

/** JSON body of an error in the given dialect. OpenAI: `{error:{message,type,param,code}}`; Anthropic: `{type:'error',error:{type,message}}`. */
export function errorBody(
  dialect: ErrorDialect,
  code: ErrorCode,
  message: string = ERRORS[code].message,
  opts: { param?: string | null; openaiType?: string } = {},
): Record<string, unknown> {
  const def: ErrorDef = ERRORS[code];
  if (dialect === 'anthropic') {
    return { type: 'error', error: { type: def.anthropicType, message } };
  }
  return {
    error: { message, type: opts.openaiType ?? def.openaiType, param: opts.param ?? null, code },
  };
}

/** Longest part of a client's path echoed in an error message, characters. */
const ECHOED_PATH_CHARS = 120;

/**
 * The message of a 404 for a path no route serves: the method and the path without its query,
 * cut to {@link ECHOED_PATH_CHARS} characters (a client's 15 kB path is not sent back whole).
 */
export function noRouteMessage(method: string, url: string): string {
  const path = url.split('?')[0] ?? '';
  return `No route for ${method} ${path.length > ECHOED_PATH_CHARS ? `${path.slice(0, ECHOED_PATH_CHARS)}…` : path}.`;
}

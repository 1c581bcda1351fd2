/**
 * Error bodies in each provider's wire shape.
 * - OpenAI (https://platform.openai.com/docs/guides/error-codes):
 *   `{"error":{"message","type","param","code"}}`.
 * - Anthropic (https://docs.anthropic.com/en/api/errors):
 *   `{"type":"error","error":{"type","message"}}` with types `invalid_request_error` (400),
 *   `authentication_error` (401), `not_found_error` (404), `rate_limit_error` (429),
 *   `api_error` (500), `overloaded_error` (529).
 * - AWS Bedrock (restJson1; https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html
 *   and the Converse operation's errors): `{"message"}` with the exception's name in the
 *   `x-amzn-errortype` header (`ThrottlingException` 429, `ValidationException` 400,
 *   `AccessDeniedException` 403, `UnrecognizedClientException` 403, `InvalidSignatureException`
 *   403, `ServiceUnavailableException` 503, `InternalServerException` 500, ...).
 */

/** Which provider's shape a route answers in. */
export type Wire = 'openai' | 'anthropic' | 'bedrock';

/** A provider error reply: HTTP status and JSON body (already serialised), and headers it needs. */
export interface ProviderError {
  readonly status: number;
  readonly body: string;
  /** Headers that are part of the error's shape (Bedrock's `x-amzn-errortype`). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** Bedrock error: `{"message"}`, and the exception's name in `x-amzn-errortype` (as AWS writes it, with its namespace). */
export function bedrockError(status: number, type: string, message: string): ProviderError {
  return { status, body: JSON.stringify({ message }), headers: { 'x-amzn-errortype': `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/` } };
}

/** OpenAI error body. `type` e.g. `invalid_request_error`, `server_error`, `requests`, `tokens`. */
export function openAIError(status: number, message: string, type: string, code: string | null = null, param: string | null = null): ProviderError {
  return { status, body: JSON.stringify({ error: { message, type, param, code } }) };
}

/** Anthropic error body. `type` e.g. `invalid_request_error`, `rate_limit_error`, `overloaded_error`. */
export function anthropicError(status: number, type: string, message: string): ProviderError {
  return { status, body: JSON.stringify({ type: 'error', error: { type, message } }) };
}

/** 400 for a malformed request, in `wire`'s shape. @param param the offending field (OpenAI's `param`). */
export function badRequest(wire: Wire, message: string, param: string | null = null): ProviderError {
  if (wire === 'bedrock') return bedrockError(400, 'ValidationException', message);
  return wire === 'openai' ? openAIError(400, message, 'invalid_request_error', null, param) : anthropicError(400, 'invalid_request_error', message);
}

/** 401 when no API key was sent (OpenAI: Authorization Bearer; Anthropic: x-api-key or Authorization Bearer). */
export function missingKey(wire: Wire): ProviderError {
  if (wire === 'bedrock') return bedrockError(403, 'MissingAuthenticationTokenException', 'Missing Authentication Token');
  return wire === 'openai'
    ? openAIError(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        'invalid_request_error',
      )
    : anthropicError(401, 'authentication_error', 'x-api-key header is required');
}

/** The injected server fault: OpenAI 500 `server_error`, Anthropic 529 `overloaded_error`. */
export function serverFault(wire: Wire): ProviderError {
  if (wire === 'bedrock') return bedrockError(503, 'ServiceUnavailableException', 'Bedrock is unable to process your request.');
  return wire === 'openai'
    ? openAIError(500, 'The server had an error while processing your request. Sorry about that!', 'server_error')
    : anthropicError(529, 'overloaded_error', 'Overloaded');
}

/** 404 for an unknown route, in `wire`'s shape. */
export function notFound(wire: Wire, method: string, url: string): ProviderError {
  if (wire === 'bedrock') return bedrockError(404, 'UnknownOperationException', `Unknown operation: ${method} ${url}`);
  return wire === 'openai'
    ? openAIError(404, `Unknown request URL: ${method} ${url}. Please check the URL for typos.`, 'invalid_request_error', 'unknown_url')
    : anthropicError(404, 'not_found_error', `Not found: ${method} ${url}`);
}

/** The credentials a request carried, as the `echo-key` faults echo them. */
export interface ReceivedCredentials {
  readonly authorization: string;
  readonly 'x-api-key': string;
}

function echoMessage(received: ReceivedCredentials): string {
  return `Incorrect API key provided. Received authorization: "${received.authorization}", x-api-key: "${received['x-api-key']}".`;
}

/**
 * The error of an `echo-key` fault (a provider that echoes the credentials it received), in
 * `wire`'s shape: 401 authentication, 429 rate limit or 500 server error; the body also carries
 * the raw headers under `received`.
 */
export function echoedKeyError(wire: Wire, status: 401 | 429 | 500, received: ReceivedCredentials): ProviderError {
  const message = echoMessage(received);
  if (wire === 'bedrock') {
    const error = bedrockError(status === 401 ? 403 : status, status === 401 ? 'UnrecognizedClientException' : status === 429 ? 'ThrottlingException' : 'InternalServerException', message);
    return { ...error, body: JSON.stringify({ message, received }) };
  }
  if (wire === 'openai') {
    const type = status === 401 ? 'invalid_request_error' : status === 429 ? 'requests' : 'server_error';
    return { status, body: JSON.stringify({ error: { message, type, param: null, code: status === 401 ? 'invalid_api_key' : null }, received }) };
  }
  const type = status === 401 ? 'authentication_error' : status === 429 ? 'rate_limit_error' : 'api_error';
  return { status, body: JSON.stringify({ type: 'error', error: { type, message }, received }) };
}

/** The mid-stream error event of the `echo-key-stream` fault, in `wire`'s SSE format. */
export function echoedKeyEvent(wire: Wire, received: ReceivedCredentials): string {
  const message = echoMessage(received);
  return wire === 'openai'
    ? `data: ${JSON.stringify({ error: { message, type: 'server_error', param: null, code: null } })}\n\n`
    : `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'api_error', message } })}\n\n`;
}

/**
 * The provider simulator's HTTP server: OpenAI's, Anthropic's and Bedrock Converse's wire formats,
 * its own per-key RPM/TPM quota with provider-style 429s, fault injection, and counters for benchmarks.
 *
 * Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings`,
 * `POST /v1/messages`, `POST /v1/messages/count_tokens`, `POST /v1/moderations`, `GET /v1/models`, Azure OpenAI's
 * `POST /openai/deployments/{deployment}/{chat/completions,completions,embeddings}` and
 * `POST /openai/v1/{chat/completions,completions,embeddings}` (see `./azure.ts`), the Responses API
 * `POST /v1/responses`, `GET|DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
 * `GET /v1/responses/{id}/input_items` (also below
 * `/openai/v1` and `/openai`; see `./openai-responses.ts`), Bedrock's
 * `POST /model/{modelId}/converse` and `POST /model/{modelId}/converse-stream` (SigV4-checked; see
 * `bedrock-routes.ts`), Gemini's OpenAI compatibility `POST /v1beta/openai/{chat/completions,embeddings}`
 * (`./gemini.ts`), vLLM's server `POST /vllm/v1/{chat/completions,completions,embeddings}`
 * (`./vllm.ts`), `GET /sim/stats`, `GET /sim/arrivals` (`./arrivals.ts`), `POST /sim/reset`.
 */
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { prepareAnthropicMessages } from './anthropic-messages.ts';
import { apiKeyOf, routeKeyOf, sendError, serveModelRequest, type ModelRoute } from './model-exchange.ts';
import { serveCountTokens } from './anthropic-count-tokens.ts';
import { azureMissingKey, azureNotFound } from './azure.ts';
import { prepareOpenAICompletions } from './openai-completions.ts';
import { anthropicModelList, openAIModelList } from './model-list.ts';
import { prepareOpenAIChat } from './openai-chat.ts';
import { prepareOpenAIResponses, storedResponseRoutes } from './openai-responses.ts';
import { prepareEmbeddings } from './openai-embeddings.ts';
import { serveModeration } from './openai-moderations.ts';
import type { SimulatorOptions } from './options.ts';
import { badRequest, bedrockError, missingKey, notFound, openAIError, anthropicError, type Wire } from './provider-errors.ts';
import { bedrockRoutes } from './bedrock-routes.ts';
import { GEMINI_PREFIX, geminiMissingKey, prepareGeminiChat } from './gemini.ts';
import { VLLM_PREFIX } from './vllm.ts';
import { rfc3339After } from '../providers/rate-limit-headers.ts';
import { SimulatorState } from './simulator-state.ts';
import { logArrival } from './arrivals.ts';
import { warmEncodings } from './prompt-tokens.ts';

/** Largest request body accepted, bytes (long-context prompts). */
const BODY_LIMIT = 64 * 1024 * 1024;

/** OpenAI's model routes, by path below `/v1` (Azure serves the same below its own prefixes). */
const OPENAI_ROUTES: readonly (ModelRoute & { path: string })[] = [
  { path: '/chat/completions', wire: 'openai', prepare: prepareOpenAIChat, idPrefix: 'chatcmpl-sim' },
  { path: '/completions', wire: 'openai', prepare: prepareOpenAICompletions, idPrefix: 'cmpl-sim' },
  { path: '/embeddings', wire: 'openai', prepare: prepareEmbeddings, idPrefix: 'emb-sim' },
  { path: '/responses', wire: 'openai', prepare: prepareOpenAIResponses, idPrefix: 'resp_sim', noPromptFilterResults: true },
];

const ROUTES: readonly (ModelRoute & { url: string })[] = [
  ...OPENAI_ROUTES.map((r) => ({ ...r, url: `/v1${r.path}` })),
  { url: '/v1/messages', wire: 'anthropic', prepare: prepareAnthropicMessages, idPrefix: 'msg_sim' },
  ...OPENAI_ROUTES.map((r) => ({ ...r, url: `/openai/deployments/:deployment${r.path}`, azure: 'deployment' as const })),
  ...OPENAI_ROUTES.map((r) => ({ ...r, url: `/openai/v1${r.path}`, azure: 'v1' as const })),
  // The `AzureOpenAI` client's Responses path: below /openai, not below a deployment.
  { url: '/openai/responses', wire: 'openai', prepare: prepareOpenAIResponses, idPrefix: 'resp_sim', noPromptFilterResults: true, azure: 'v1' },
  // Gemini's OpenAI compatibility (./gemini.ts) and vLLM's server (./vllm.ts).
  { url: `${GEMINI_PREFIX}/chat/completions`, wire: 'openai', prepare: prepareGeminiChat, idPrefix: 'gemini-sim', flavor: 'gemini' },
  { url: `${GEMINI_PREFIX}/embeddings`, wire: 'openai', prepare: prepareEmbeddings, idPrefix: 'gemini-emb-sim', flavor: 'gemini' },
  ...OPENAI_ROUTES.filter((r) => r.path !== '/responses').map((r) => ({ ...r, url: `${VLLM_PREFIX}/v1${r.path}`, idPrefix: `vllm-${r.idPrefix}`, flavor: 'vllm' as const })),
];

function wireOfUrl(url: string): Wire {
  if (url.startsWith('/model/')) return 'bedrock';
  return url.startsWith('/v1/messages') ? 'anthropic' : 'openai';
}

/**
 * Builds the simulator (not listening; use `inject` in tests or `listen`).
 * @throws RangeError when an option is out of range.
 */
export function buildSimulator(opts: SimulatorOptions = {}): FastifyInstance {
  const state = new SimulatorState(opts);
  const app = Fastify({ logger: false, bodyLimit: BODY_LIMIT, forceCloseConnections: true, return503OnClosing: false });
  const { stats } = state;
  // As OpenAI: an empty body with a JSON content type is no body where the route takes none (GET,
  // DELETE, `POST …/cancel`: the Python SDK sends `content-type: application/json` with nothing);
  // elsewhere it is a JSON error (400, "We could not parse the JSON body of your request").
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') {
      if (req.method !== 'POST' || req.routeOptions.url?.endsWith('/cancel') === true) return done(null, undefined);
      return done(Object.assign(new Error('empty JSON body'), { statusCode: 400, code: 'FST_ERR_CTP_EMPTY_JSON_BODY' }), undefined);
    }
    try {
      done(null, JSON.parse(body as string));
    } catch (err) {
      done(Object.assign(err as Error, { statusCode: 400 }), undefined);
    }
  });

  for (const route of ROUTES) {
    app.post(route.url, {
      // Counts and logs the request and checks the key before the body is parsed, as a provider does.
      onRequest: (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
        stats.requests++;
        const key = routeKeyOf(route, req.headers);
        logArrival(state.arrivals, state.opts.clock.now(), key, route.wire, req, reply.raw);
        if (key === '') {
          stats.errors++;
          sendError(reply, route.azure !== undefined ? azureMissingKey() : route.flavor === 'gemini' ? geminiMissingKey() : missingKey(route.wire));
          return;
        }
        stats.key(key).requests++;
        done();
      },
      handler: (req, reply) => serveModelRequest(state, route, req, reply),
    });
  }

  app.post('/v1/messages/count_tokens', {
    onRequest: (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      stats.requests++;
      if (apiKeyOf('anthropic', req.headers) === '') {
        stats.errors++;
        sendError(reply, missingKey('anthropic'));
        return;
      }
      done();
    },
    handler: (req, reply) => serveCountTokens(state, req, reply),
  });
  void app.register(bedrockRoutes(state));
  app.post('/v1/moderations', (req, reply) => serveModeration(state, req, reply));

  app.get('/v1/models', (req, reply) => {
    const anthropic = req.headers['anthropic-version'] !== undefined;
    const wire: Wire = anthropic ? 'anthropic' : 'openai';
    if (apiKeyOf(wire, req.headers) === '') return sendError(reply, missingKey(wire));
    const now = state.opts.clock.now();
    const body = anthropic ? anthropicModelList(rfc3339After(0, 1_700_000_000_000)) : openAIModelList(Math.floor(now / 1000));
    reply.header('content-type', 'application/json').send(body);
  });

  for (const prefix of ['/v1', '/openai/v1', '/openai']) storedResponseRoutes(app, state, prefix);

  app.get('/sim/stats', (_req, reply) => {
    reply.send(stats.snapshot());
  });
  app.get('/sim/arrivals', (req, reply) => {
    const raw = (req.query as Record<string, string | undefined>)['since'];
    const since = raw === undefined ? undefined : Number(raw);
    if (since !== undefined && (raw?.trim() === '' || !Number.isFinite(since))) {
      return sendError(reply, badRequest('openai', `since must be a time in ms since the epoch, got "${raw}"`, 'since'));
    }
    reply.send(state.arrivals.snapshot(since));
  });
  app.post('/sim/outside', (req, reply) => {
    const body = (req.body ?? {}) as { key?: unknown; fraction?: unknown };
    if (typeof body.key !== 'string' || body.key === '' || typeof body.fraction !== 'number' || !(body.fraction >= 0 && body.fraction <= 1)) {
      return sendError(reply, badRequest('openai', 'the body must be {"key": "<api key>", "fraction": <0..1 of its quota per minute>}', null));
    }
    if (state.quota.rpm === null && state.quota.tpm === null && body.fraction > 0) return sendError(reply, badRequest('openai', 'an outside client needs a simulator quota (rpm or tpm)', null));
    state.setOutside(body.key, body.fraction);
    reply.send({ ok: true });
  });
  app.get('/sim/outside', (_req, reply) => {
    reply.send(state.outside?.stats() ?? null);
  });
  app.addHook('onClose', async () => {
    state.outside?.stop();
  });
  app.post('/sim/reset', (_req, reply) => {
    state.reset();
    reply.send({ ok: true });
  });

  app.setErrorHandler((err: FastifyError, req, reply) => {
    const wire = wireOfUrl(req.url);
    if (wire === 'bedrock' || req.url.startsWith('/v1/') || req.url.startsWith('/openai/')) stats.errors++;
    const status = err.statusCode ?? 500;
    if (status === 400 && (err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || err instanceof SyntaxError)) {
      const message =
        wire === 'openai'
          ? "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"
          : 'There was an issue with the format of your request: the body is not valid JSON.';
      return sendError(reply, badRequest(wire, message));
    }
    if (wire === 'bedrock') return sendError(reply, status < 500 ? bedrockError(status, 'ValidationException', err.message) : bedrockError(500, 'InternalServerException', err.message));
    if (status < 500) {
      return sendError(reply, wire === 'openai' ? openAIError(status, err.message, 'invalid_request_error') : anthropicError(status, 'invalid_request_error', err.message));
    }
    return sendError(reply, wire === 'openai' ? openAIError(500, err.message, 'server_error') : anthropicError(500, 'api_error', err.message));
  });
  app.setNotFoundHandler((req, reply) => sendError(reply, req.url.startsWith('/openai/') ? azureNotFound() : notFound(wireOfUrl(req.url), req.method, req.url)));
  return app;
}

/**
 * Builds the simulator, loads its tokenizers (so the first requests do not wait for them) and listens.
 * @param opts simulator options plus `host` (@default '127.0.0.1') and `port` (@default 0: a free port).
 * @returns its base URL (e.g. `http://127.0.0.1:9090`) and `close()`, which ends open streams.
 * @throws when the port cannot be bound, or RangeError for an out-of-range option.
 */
export async function startSimulator(opts: SimulatorOptions & { host?: string; port?: number }): Promise<{ url: string; close(): Promise<void> }> {
  const app = buildSimulator(opts);
  warmEncodings();
  const host = opts.host ?? '127.0.0.1';
  await app.listen({ host, port: opts.port ?? 0 });
  const addr = app.server.address() as AddressInfo;
  const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return { url: `http://${shown}:${addr.port}`, close: () => app.close() };
}

/**
 * OpenAI's Responses API as the simulator speaks it (https://platform.openai.com/docs/api-reference/responses,
 * shapes as typed by the `openai` SDK 6.49: `Response`, `ResponseUsage`, `ResponseStreamEvent`):
 * - `POST /v1/responses`: `input` a string or items, `instructions`, `tools`, `max_output_tokens`
 *   (at least 16, as OpenAI requires; it caps reasoning and visible output together: the
 *   response is `incomplete` with `incomplete_details.reason: "max_output_tokens"` when it hits it),
 *   `previous_response_id` (a stored response of the same key, else 400: its input and output are
 *   this request's prompt too, reported as cached when ≥ 1024 tokens, in 128-token steps),
 *   `store` (default true), `background` (answers at once `queued` with `usage: null`; the response
 *   is in progress until its completion time, then final).
 *   JSON: a `response` object. SSE, each event `event: <type>\ndata: {"type":…,"sequence_number":n,…}`:
 *   `response.created`, `response.in_progress`, (reasoning: `response.output_item.added` and
 *   `.done` of a `reasoning` item, no deltas), `response.output_item.added` (message),
 *   `response.content_part.added`, one `response.output_text.delta` per token,
 *   `response.output_text.done`, `response.content_part.done`, `response.output_item.done`,
 *   `response.completed` (or `response.incomplete`) with the whole response and its usage
 *   `{input_tokens, input_tokens_details.cached_tokens, output_tokens,
 *   output_tokens_details.reasoning_tokens, total_tokens}`. No `[DONE]`.
 * - `GET /v1/responses/{id}` (JSON; `?stream=true`: the terminal event once final), `DELETE`,
 *   `POST /v1/responses/{id}/cancel` (a background response not yet final becomes `cancelled`,
 *   its usage the input alone), `GET /v1/responses/{id}/input_items`: see {@link storedResponseRoutes}.
 * Prompt tokens: the request's chat form (`responsesPromptForCounting`) counted by the chat rules.
 * Headers: `x-sim-output-tokens` (visible output), `x-sim-reasoning-tokens` (reasoning, default 0),
 * `x-sim-background-ms` (how long a background response takes after it was answered; default
 * the visible output at the simulator's pace, 0 when unpaced).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { responsesPromptForCounting } from '../providers/translate/responses-to-chat.ts';
import { azureKeyOf, azureMissingKey } from './azure.ts';
import { apiKeyOf, sendError } from './model-exchange.ts';
import { OUTPUT_UNIT, outputLength, outputText } from './output-tokens.ts';
import type { Prepare, PreparedRequest, ReplyIdentity } from './prepared-request.ts';
import { badRequest, missingKey, openAIError } from './provider-errors.ts';
import { inputItemsOf, inputItemsPage } from './input-items.ts';
import { headerValue, isFieldError, isJsonObject, readCap } from './request-fields.ts';
import type { StreamPlan } from './reply-writer.ts';
import type { StoredResponse, StoredUsage } from './response-store.ts';
import type { SimulatorState } from './simulator-state.ts';

/** OpenAI's smallest `max_output_tokens`. */
export const MIN_MAX_OUTPUT_TOKENS = 16;

/** Prompt tokens from which OpenAI's prompt cache applies, and its step. */
const CACHE_MIN = 1024;
const CACHE_STEP = 128;

function usageJson(u: StoredUsage): string {
  return `{"input_tokens":${u.input},"input_tokens_details":{"cached_tokens":${u.cached}},"output_tokens":${u.output},"output_tokens_details":{"reasoning_tokens":${u.reasoning}},"total_tokens":${u.input + u.output}}`;
}

function event(type: string, seq: number, fields: string): string {
  return `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq},${fields}}\n\n`;
}

/** A non-negative integer header, undefined when absent, or a message. */
function countHeader(name: string, value: string | undefined): number | undefined | string {
  if (value === undefined) return undefined;
  if (!/^\d{1,9}$/.test(value)) return `${name} must be a non-negative integer, got "${value}"`;
  return Number(value);
}

/** The request fields a Response echoes, as JSON members in OpenAI's order (before `model` and after). */
function echo(body: Record<string, unknown>): { before: string; after: string } {
  const j = (v: unknown, fallback: string): string => (v === undefined || v === null ? fallback : JSON.stringify(v));
  return {
    before: `"instructions":${j(body['instructions'], 'null')},"max_output_tokens":${j(body['max_output_tokens'], 'null')},"max_tool_calls":null`,
    after:
      `"parallel_tool_calls":${j(body['parallel_tool_calls'], 'true')},"previous_response_id":${j(body['previous_response_id'], 'null')},"prompt_cache_key":null,` +
      `"reasoning":${j(body['reasoning'], '{"effort":null,"summary":null}')},"safety_identifier":null,"service_tier":"default","store":${body['store'] === false ? 'false' : 'true'},` +
      `"temperature":${j(body['temperature'], '1.0')},"text":${j(body['text'], '{"format":{"type":"text"},"verbosity":"medium"}')},"tool_choice":${j(body['tool_choice'], '"auto"')},` +
      `"tools":${j(body['tools'], '[]')},"top_logprobs":0,"top_p":${j(body['top_p'], '1.0')},"truncation":"disabled"`,
  };
}

/** Prepares a Responses request (400 for a bad `input`, cap, header, or an unknown `previous_response_id`). */
export const prepareOpenAIResponses: Prepare = (body, model, headers, ctx) => {
  const input = body['input'];
  if (input !== undefined && input !== null && typeof input !== 'string' && !Array.isArray(input)) {
    return { message: "Invalid type for 'input': expected one of a string or an array of input items.", param: 'input' };
  }
  const cap = readCap(body, ['max_output_tokens']);
  if (isFieldError(cap)) return cap;
  if (cap !== undefined && cap < MIN_MAX_OUTPUT_TOKENS) {
    return { message: `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= ${MIN_MAX_OUTPUT_TOKENS}, but got ${cap} instead.`, param: 'max_output_tokens' };
  }
  const store = body['store'] !== false;
  const background = body['background'] === true;
  if (background && !store) return { message: 'Background responses must be stored: store cannot be false with background.', param: 'background' };
  const previousId = body['previous_response_id'];
  let context = 0;
  if (previousId !== undefined && previousId !== null) {
    const previous = typeof previousId === 'string' ? ctx.responses?.get(previousId, ctx.key ?? '') : undefined;
    if (previous === undefined) return { message: `Previous response with id '${String(previousId)}' not found.`, param: 'previous_response_id' };
    context = previous.usage.input + previous.usage.output;
  }
  const wantedReasoning = countHeader('x-sim-reasoning-tokens', headerValue(headers['x-sim-reasoning-tokens']));
  if (typeof wantedReasoning === 'string') return { message: wantedReasoning, param: null };
  const backgroundMs = countHeader('x-sim-background-ms', headerValue(headers['x-sim-background-ms']));
  if (typeof backgroundMs === 'string') return { message: backgroundMs, param: null };
  const out = outputLength(headerValue(headers['x-sim-output-tokens']), cap, ctx.defaultOutputTokens);
  if (typeof out === 'string') return { message: out, param: null };
  const reasoning = Math.min(wantedReasoning ?? 0, cap ?? Infinity);
  const visible = cap === undefined ? out.tokens : Math.min(out.tokens, cap - reasoning);
  const incomplete = cap !== undefined && reasoning + visible >= cap;
  const promptTokens = ctx.prompts.openAIChat(model, responsesPromptForCounting(body).chat) + context;
  const cached = context >= CACHE_MIN ? Math.floor(context / CACHE_STEP) * CACHE_STEP : 0;
  const usage: StoredUsage = { input: promptTokens, cached, output: visible + reasoning, reasoning };
  const stream = body['stream'] === true;
  const modelJson = JSON.stringify(model);
  const echoed = echo(body);
  const finalStatus = incomplete ? 'incomplete' : 'completed';
  const suffix = (ids: ReplyIdentity): string => ids.id.replace(/^resp_/, '');
  const reasoningItem = (ids: ReplyIdentity): string => `{"id":"rs_${suffix(ids)}","type":"reasoning","summary":[]}`;
  const textPart = (text: string): string => `{"type":"output_text","annotations":[],"logprobs":[],"text":${JSON.stringify(text)}}`;
  const messageItem = (ids: ReplyIdentity, status: string, text: string | null): string =>
    `{"id":"msg_${suffix(ids)}","type":"message","status":"${status}","content":[${text === null ? '' : textPart(text)}],"role":"assistant"}`;
  /** The Response object's JSON; output and usage only when final. */
  const render = (ids: ReplyIdentity, status: string, final: boolean, u: StoredUsage): string => {
    const output = final && status !== 'cancelled' ? [...(u.reasoning > 0 ? [reasoningItem(ids)] : []), messageItem(ids, 'completed', outputText(u.output - u.reasoning))].join(',') : '';
    const reported = status === 'cancelled' ? { ...u, output: 0, reasoning: 0 } : u;
    const details = status === 'incomplete' ? '{"reason":"max_output_tokens"}' : 'null';
    return (
      `{"id":"${ids.id}","object":"response","created_at":${ids.created},"status":"${status}","background":${background},` +
      `"completed_at":${final ? ids.created : 'null'},"error":null,"incomplete_details":${details},${echoed.before},"model":${modelJson},` +
      `"output":[${output}],${echoed.after},"usage":${final ? usageJson(reported) : 'null'},"user":null,"metadata":${JSON.stringify(isJsonObject(body['metadata']) ? body['metadata'] : {})}}`
    );
  };
  const prepared: PreparedRequest = {
    model,
    stream,
    promptTokens,
    outputTokens: visible + reasoning,
    hiddenOutputTokens: reasoning,
    reserveTokens: promptTokens + (cap ?? visible + reasoning),
    json: (ids) => (background ? render(ids, 'queued', false, usage) : render(ids, finalStatus, true, usage)),
    plan: (ids): StreamPlan => {
      let seq = 0;
      const shell = render(ids, 'in_progress', false, usage);
      const msg = `msg_${suffix(ids)}`;
      const index = reasoning > 0 ? 1 : 0;
      let head = event('response.created', seq++, `"response":${shell}`) + event('response.in_progress', seq++, `"response":${shell}`);
      if (reasoning > 0) {
        head += event('response.output_item.added', seq++, `"output_index":0,"item":${reasoningItem(ids)}`);
        head += event('response.output_item.done', seq++, `"output_index":0,"item":${reasoningItem(ids)}`);
      }
      head += event('response.output_item.added', seq++, `"output_index":${index},"item":${messageItem(ids, 'in_progress', null)}`);
      head += event('response.content_part.added', seq++, `"item_id":"${msg}","output_index":${index},"content_index":0,"part":${textPart('')}`);
      const base = seq;
      const delta = JSON.stringify(OUTPUT_UNIT);
      const unitAt = (i: number): string => event('response.output_text.delta', base + i, `"item_id":"${msg}","output_index":${index},"content_index":0,"delta":${delta},"logprobs":[]`);
      seq = base + visible;
      const text = outputText(visible);
      const tail =
        event('response.output_text.done', seq++, `"item_id":"${msg}","output_index":${index},"content_index":0,"text":${JSON.stringify(text)},"logprobs":[]`) +
        event('response.content_part.done', seq++, `"item_id":"${msg}","output_index":${index},"content_index":0,"part":${textPart(text)}`) +
        event('response.output_item.done', seq++, `"output_index":${index},"item":${messageItem(ids, 'completed', text)}`) +
        event(`response.${finalStatus}`, seq++, `"response":${render(ids, finalStatus, true, usage)}`);
      return { head, unit: unitAt(0), unitAt, units: visible, tail };
    },
    ended: (outcome, sent, ids) => {
      const responses = ctx.responses;
      if (!store || responses === undefined) return;
      // A background response goes on without its client; a foreground stream cut short ends where it was cut.
      const whole = background || outcome === 'completed';
      const final: StoredUsage = whole ? usage : { ...usage, output: sent + reasoning };
      const tps = ctx.paceTokensPerSecond ?? 0;
      const pace = tps > 0 ? Math.ceil((visible / tps) * 1_000) : 0;
      const r: StoredResponse = {
        id: ids.id,
        key: ctx.key ?? '',
        background,
        completeAtMs: responses.now() + (background && !stream ? (backgroundMs ?? pace) : 0),
        finalStatus: whole ? finalStatus : 'incomplete',
        usage: final,
        render: (status, isFinal) => render(ids, status, isFinal, final),
        inputItems: inputItemsOf(body['input'], suffix(ids)),
        cancelled: false,
      };
      responses.put(r);
    },
  };
  return prepared;
};

/** The key of a stored-response call: Azure's ways below `/openai`, OpenAI's elsewhere ('' when missing). */
function keyOf(req: FastifyRequest): string {
  return req.url.startsWith('/openai/') ? azureKeyOf(req.headers) : apiKeyOf('openai', req.headers);
}

function notFound(id: string): ReturnType<typeof openAIError> {
  return openAIError(404, `Response with id '${id}' not found.`, 'invalid_request_error', null, null);
}

/**
 * Registers the calls on a stored response below `prefix` (`/v1`, `/openai/v1`, `/openai`):
 * `GET /responses/{id}` (JSON, or `?stream=true` — the terminal event once final, after an
 * `in_progress` event while it is not), `DELETE /responses/{id}`, `POST /responses/{id}/cancel`,
 * `GET /responses/{id}/input_items` (`./input-items.ts`).
 */
export function storedResponseRoutes(app: FastifyInstance, state: SimulatorState, prefix: string): void {
  const store = state.responses;
  const json = (reply: FastifyReply, body: string): void => {
    reply.code(200).headers({ 'content-type': 'application/json; charset=utf-8', 'x-request-id': state.nextId('req_sim') }).send(body);
  };
  const find = (req: FastifyRequest, reply: FastifyReply): StoredResponse | undefined => {
    const key = keyOf(req);
    if (key === '') {
      sendError(reply, req.url.startsWith('/openai/') ? azureMissingKey() : missingKey('openai'));
      return undefined;
    }
    const { id } = req.params as { id: string };
    const r = store.get(id, key);
    if (r === undefined) sendError(reply, notFound(id));
    return r;
  };
  app.get(`${prefix}/responses/:id`, (req, reply) => {
    const r = find(req, reply);
    if (r === undefined) return;
    const status = store.statusOf(r);
    const final = store.isFinal(r);
    if ((req.query as Record<string, string | undefined>)['stream'] !== 'true') return json(reply, r.render(status, final));
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-request-id': state.nextId('req_sim') });
    const terminal = (): string => {
      const s = store.statusOf(r);
      return event(s === 'cancelled' ? 'response.cancelled' : `response.${s}`, 1, `"response":${r.render(s, true)}`);
    };
    if (final) return void reply.raw.end(terminal());
    reply.raw.write(event('response.in_progress', 0, `"response":${r.render('in_progress', false)}`));
    const timer = setTimeout(() => reply.raw.end(terminal()), Math.max(0, r.completeAtMs - store.now()));
    reply.raw.once('close', () => clearTimeout(timer));
  });
  app.delete(`${prefix}/responses/:id`, (req, reply) => {
    const r = find(req, reply);
    if (r === undefined) return;
    store.delete(r.id, r.key);
    json(reply, `{"id":"${r.id}","object":"response.deleted","deleted":true}`);
  });
  app.get(`${prefix}/responses/:id/input_items`, (req, reply) => {
    const r = find(req, reply);
    if (r === undefined) return;
    const page = inputItemsPage(r.inputItems, req.query as Record<string, string | undefined>);
    if ('error' in page) return sendError(reply, badRequest('openai', page.error, page.param));
    json(reply, page.json);
  });
  app.post(`${prefix}/responses/:id/cancel`, (req, reply) => {
    const r = find(req, reply);
    if (r === undefined) return;
    if (!r.background) return sendError(reply, badRequest('openai', 'Only responses created with background=true can be cancelled.', null));
    if (!store.isFinal(r)) r.cancelled = true;
    json(reply, r.render(store.statusOf(r), true));
  });
}

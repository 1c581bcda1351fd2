/**
 * `POST /v1/messages/count_tokens` in Anthropic's wire format
 * (https://docs.anthropic.com/en/api/messages-count-tokens): the body of a messages request without
 * `max_tokens` (model, messages, system, tools, ...), answered `{"input_tokens": N}` with N counted
 * as `usage.input_tokens` of the same messages request. Free, as Anthropic's is: it takes nothing
 * from the key's quota.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from './model-exchange.ts';
import { badRequest } from './provider-errors.ts';
import { isFieldError, readModel } from './request-fields.ts';
import type { SimulatorState } from './simulator-state.ts';

/** Answers one count_tokens request (its key was checked and counted by the route's hook). */
export function serveCountTokens(state: SimulatorState, req: FastifyRequest, reply: FastifyReply): void {
  const model = readModel(req.body);
  if (isFieldError(model)) {
    state.stats.errors++;
    return sendError(reply, badRequest('anthropic', `${model.param ?? 'body'}: ${model.message}`));
  }
  const body = req.body as Record<string, unknown>;
  if (!Array.isArray(body['messages'])) {
    state.stats.errors++;
    return sendError(reply, badRequest('anthropic', 'messages: Field required'));
  }
  state.stats.countTokens++;
  const inputTokens = state.prompts.anthropicMessages(model, body);
  reply.code(200).headers({ 'content-type': 'application/json; charset=utf-8', 'request-id': state.nextId('req_sim') }).send(`{"input_tokens":${inputTokens}}`);
}

/**
 * Azure OpenAI's paths, so clients can call quotaring with the openai SDK's `AzureOpenAI` client
 * (`endpoint: <quotaring URL>`, its key sent as `api-key`) or with any client of Azure's v1 API
 * (`baseURL: <quotaring URL>/openai/v1`):
 * - classic deployment URLs `POST /openai/deployments/{deployment}/chat/completions|completions|embeddings`:
 *   `{deployment}` names the quotaring model (it wins over the body's `model`, as on Azure); the
 *   `api-version` query the client sends is accepted and not needed (each deployment's `base_url`
 *   carries its own);
 * - the v1 API `POST /openai/v1/chat/completions|completions|embeddings` (the model in the body).
 * Same handlers, limits and replies as `/v1/...`; errors in OpenAI's shape, which Azure's clients read.
 */
import type { FastifyInstance } from 'fastify';
import type { GatewayContext } from '../context.ts';
import { completionsHandler } from './completions.ts';
import { chatCompletionsHandler, embeddingsHandler } from './openai.ts';
import type { ApiHandler } from './openai.ts';

/** `handler`, with the body's `model` set to the `{deployment}` of a classic Azure deployment URL. */
function fromDeploymentPath(handler: ApiHandler): ApiHandler {
  return (request, reply) => {
    const { deployment } = request.params as { deployment: string };
    const body = request.body;
    if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
      const fields = body as Record<string, unknown>;
      if (fields.model !== deployment) {
        fields.model = deployment;
        // The bytes received name another model: the body is sent re-serialized.
        request.rawBody = null;
      }
    }
    return handler(request, reply);
  };
}

/** Registers Azure OpenAI's classic deployment paths and v1 API paths (see the module comment). */
export function azureRoutes(app: FastifyInstance, ctx: GatewayContext): void {
  const apis: readonly (readonly [string, ApiHandler])[] = [
    ['/chat/completions', chatCompletionsHandler(ctx)],
    ['/completions', completionsHandler(ctx)],
    ['/embeddings', embeddingsHandler(ctx)],
  ];
  for (const [path, handler] of apis) {
    app.post(`/openai/deployments/:deployment${path}`, fromDeploymentPath(handler));
    app.post(`/openai/v1${path}`, handler);
  }
}

/**
 * The simulator's Bedrock runtime routes, `POST /model/{modelId}/converse` and
 * `/converse-stream`, in their own fastify scope: there the JSON body is also kept as the bytes
 * that arrived, because the SigV4 signature covers them. A request is authenticated as Bedrock
 * does it: a SigV4 signature (service `bedrock`) checked with the same signer the AWS SDKs use,
 * against the credentials the simulator accepts; or a Bedrock API key as a bearer token.
 * Refusals use Bedrock's shape: 403 `MissingAuthenticationTokenException`,
 * `UnrecognizedClientException` (unknown key or session token), `InvalidSignatureException`
 * (signature mismatch, or a date more than 5 minutes off).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AwsCredentials } from '../providers/bedrock/credentials.ts';
import { verifyBedrockSignature } from '../providers/bedrock/sigv4.ts';
import { prepareBedrockConverse, prepareBedrockConverseStream } from './bedrock-converse.ts';
import { apiKeyOf, sendError, serveModelRequest, type ModelRoute } from './model-exchange.ts';
import { bedrockError, missingKey } from './provider-errors.ts';
import type { SimulatorState } from './simulator-state.ts';
import { logArrival } from './arrivals.ts';

/** The bytes of each request body, for signature checks. */
const rawBodies = new WeakMap<FastifyRequest, Buffer>();

/** Registers the Bedrock routes in their own scope (call with `app.register`). */
export function bedrockRoutes(state: SimulatorState): (scope: FastifyInstance) => Promise<void> {
  const { stats } = state;
  const accepted = new Map<string, AwsCredentials>(state.opts.bedrockCredentials.map((c) => [c.accessKeyId, c]));
  return async (scope) => {
    scope.removeContentTypeParser('application/json');
    scope.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
      const bytes = body as Buffer;
      rawBodies.set(req, bytes);
      try {
        done(null, bytes.length === 0 ? {} : JSON.parse(bytes.toString('utf8')));
      } catch (err) {
        (err as { statusCode?: number }).statusCode = 400;
        done(err as Error, undefined);
      }
    });

    // Answers a request whose signature fails (and returns the reply, which ends the hooks).
    const authenticate = async (req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> => {
      const auth = req.headers.authorization ?? '';
      if (auth.slice(0, 7).toLowerCase() === 'bearer ') return undefined; // a Bedrock API key
      const verdict = await verifyBedrockSignature(
        { method: req.method, url: req.url, headers: req.headers, body: rawBodies.get(req) ?? Buffer.alloc(0) },
        (id) => accepted.get(id),
        state.opts.clock.now(),
      );
      if (verdict.ok) return undefined;
      stats.errors++;
      const type = verdict.kind === 'missing' ? 'MissingAuthenticationTokenException' : verdict.kind === 'unknown_key' ? 'UnrecognizedClientException' : 'InvalidSignatureException';
      sendError(reply, bedrockError(403, type, verdict.message));
      return reply;
    };

    for (const [operation, prepare] of [
      ['converse', prepareBedrockConverse],
      ['converse-stream', prepareBedrockConverseStream],
    ] as const) {
      const route: ModelRoute = { wire: 'bedrock', prepare, idPrefix: 'bdrk-sim', modelOf: (req) => (req.params as { modelId: string }).modelId };
      scope.post(`/model/:modelId/${operation}`, {
        // Counts and logs the request and checks that it carries credentials before the body is read.
        onRequest: (req, reply, done) => {
          stats.requests++;
          const key = apiKeyOf('bedrock', req.headers);
          logArrival(state.arrivals, state.opts.clock.now(), key, 'bedrock', req, reply.raw);
          if (key === '') {
            stats.errors++;
            sendError(reply, missingKey('bedrock'));
            return;
          }
          stats.key(key).requests++;
          done();
        },
        preHandler: authenticate,
        handler: (req, reply) => serveModelRequest(state, route, req, reply),
      });
    }
  };
}

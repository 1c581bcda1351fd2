/**
 * The reference for `npm run bench:node`: a bare fastify + undici pass-through proxy with no
 * limits, no auth and no token counting — the floor any gateway pays for proxying.
 * Usage: node --import tsx bench/lib/bare-proxy.ts <port> <upstream origin> [buffer|stream]
 * `buffer` (default) reads the whole upstream answer before sending it; `stream` pipes the upstream
 * body to the client as it comes (a bare stream pass-through, for SSE streams).
 */
import Fastify from 'fastify';
import { Pool } from 'undici';

const port = Number(process.argv[2] ?? 8081);
const streamed = process.argv[4] === 'stream';
// Streams hold their connection for the whole stream: one each, as many as the load opens.
const upstream = new Pool(process.argv[3] ?? 'http://127.0.0.1:9090', { connections: streamed ? 4_096 : 128 });
const app = Fastify({ logger: false, bodyLimit: 4 * 1_048_576 });
app.removeAllContentTypeParsers();
app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

app.post('/v1/chat/completions', async (request, reply) => {
  const res = await upstream.request({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { 'content-type': 'application/json', authorization: 'Bearer bench-sim-key' },
    body: request.body as Buffer,
  });
  if (streamed) return reply.code(res.statusCode).header('content-type', res.headers['content-type']).send(res.body);
  const text = await res.body.text();
  return reply.code(res.statusCode).header('content-type', 'application/json').send(text);
});
app.get('/healthz', async () => ({ status: 'ok' }));

await app.listen({ host: '127.0.0.1', port });
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));

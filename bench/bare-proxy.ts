/**
 * The reference for `npm run bench:node`: a bare fastify + undici pass-through proxy with no
 * limits, no auth and no token counting — the floor any gateway pays for proxying.
 * Usage: node --import tsx bench/bare-proxy.ts <port> <upstream origin>
 */
import Fastify from 'fastify';
import { Pool } from 'undici';

const port = Number(process.argv[2] ?? 8081);
const upstream = new Pool(process.argv[3] ?? 'http://127.0.0.1:9090', { connections: 128 });
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
  const text = await res.body.text();
  return reply.code(res.statusCode).header('content-type', 'application/json').send(text);
});
app.get('/healthz', async () => ({ status: 'ok' }));

await app.listen({ host: '127.0.0.1', port });
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));

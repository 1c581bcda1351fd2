/**
 * Micro-benchmark of the cluster signatures (src/security/): µs per router sign (one HMAC-SHA256
 * over method, path, timestamp and the six internal headers), per node verify of the same request,
 * per internal call's sign (body digest + nonce + HMAC, a 100-byte settlement), and per 128-bit
 * request id.
 *
 * Run: `node --import tsx bench/micro/signatures.ts [--runs 7] [--ops 200000]`
 * Prints one JSON line, then a readable line. Each figure is the median over runs of (run time / ops).
 */
import { parseArgs } from 'node:util';
import { ClusterSecret } from '../../src/security/cluster-secret.ts';
import { randomId } from '../../src/security/random-id.ts';
import { RequestSigner, SIGNATURE_HEADER } from '../../src/security/request-signature.ts';
import type { SignedRequest } from '../../src/security/request-signature.ts';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '7' }, ops: { type: 'string', default: '200000' } } });
const RUNS = Number(values.runs);
const OPS = Number(values.ops);

const signer = new RequestSigner(new ClusterSecret('bench-cluster-secret-0123456789abcdef0123'));
const req: SignedRequest = {
  method: 'POST',
  path: '/v1/chat/completions',
  headers: { authorization: 'Bearer qr-demo-alice', 'content-type': 'application/json', 'x-quotaring-tenant': 'alice', 'x-quotaring-ring': '3f2a9c0d1b7e', 'x-quotaring-fallback-for': 'node-2' },
};
const signed: SignedRequest = { ...req, headers: { ...req.headers, [SIGNATURE_HEADER]: signer.signature(req) } };
const settlement = JSON.stringify({ op: 'finish', tenant: 'alice', id: '1a2b3c4d-AAAAAAAAAAAAAAAAAAAAAA', tokens: 1234 });

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

/** µs per call of `fn`, median over runs (after one warm-up run). */
function measure(fn: () => unknown): number {
  const runs: number[] = [];
  let sink = 0;
  for (let r = 0; r <= RUNS; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < OPS; i++) if (fn() !== undefined) sink++;
    const us = Number(process.hrtime.bigint() - t0) / 1_000 / OPS;
    if (r > 0) runs.push(us);
  }
  if (sink < 0) console.log(sink);
  return median(runs);
}

const results = {
  signUs: measure(() => signer.signature(req)),
  verifyUs: measure(() => signer.verify(signed)),
  signInternalUs: measure(() => signer.signInternal('POST', 'http://127.0.0.1:8101/_quotaring/v1/settlements', { 'content-type': 'application/json' }, settlement)),
  randomIdUs: measure(() => randomId()),
  ops: OPS,
  runs: RUNS,
  node: process.version,
};
const round = (x: number): number => Math.round(x * 1000) / 1000;
console.log(JSON.stringify(Object.fromEntries(Object.entries(results).map(([k, v]) => [k, typeof v === 'number' ? round(v) : v]))));
console.log(
  `router sign ${round(results.signUs)} µs, node verify ${round(results.verifyUs)} µs, sign + verify ${round(results.signUs + results.verifyUs)} µs per request; ` +
    `internal call sign ${round(results.signInternalUs)} µs; random id ${round(results.randomIdUs)} µs`,
);

/**
 * Bedrock's wire layer through the Smithy packages, no I/O:
 * - event-stream: messages encoded by the codec decode to the same events, whatever the chunk
 *   boundaries of the byte stream (every split of a two-message stream); an exception message
 *   becomes an `error` event; a flipped byte fails the CRC and the stream throws;
 * - SigV4: a request signed for the gateway verifies; another body, another secret, another date
 *   (beyond 5 minutes), a missing session token and a foreign service scope are refused.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { SseEvent } from '../../src/providers/sse.ts';
import { bedrockEvents, decodeMessage, encodeEvent, encodeException } from '../../src/providers/bedrock/event-stream.ts';
import { signBedrockRequest, verifyBedrockSignature } from '../../src/providers/bedrock/sigv4.ts';

async function* chunks(parts: readonly Uint8Array[]): AsyncGenerator<Uint8Array> {
  for (const p of parts) yield p;
}

async function collect(parts: readonly Uint8Array[]): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  for await (const batch of bedrockEvents(chunks(parts))) out.push(...batch);
  return out;
}

describe('event-stream codec', () => {
  const a = encodeEvent('contentBlockDelta', { contentBlockIndex: 0, delta: { text: ' the' } });
  const b = encodeEvent('metadata', { usage: { inputTokens: 3, outputTokens: 1, totalTokens: 4 } });
  const both = Buffer.concat([a, b]);

  test('an encoded event decodes to its type and payload', () => {
    assert.deepEqual(decodeMessage(a), { raw: '', event: 'contentBlockDelta', data: '{"contentBlockIndex":0,"delta":{"text":" the"}}' });
    assert.deepEqual(decodeMessage(encodeException('throttlingException', 'Too many requests')), { raw: '', event: 'error', data: '{"exception":"throttlingException","message":"Too many requests"}' });
  });

  test('every split of a two-message stream yields the same two events', async () => {
    for (let i = 0; i <= both.length; i++) {
      for (const j of [i, Math.min(both.length, i + 1), Math.min(both.length, i + 17)]) {
        const events = await collect([both.subarray(0, i), both.subarray(i, j), both.subarray(j)].filter((p) => p.length > 0));
        assert.deepEqual(
          events.map((e) => e.event),
          ['contentBlockDelta', 'metadata'],
          `split at ${i}, ${j}`,
        );
      }
    }
  });

  test('a corrupted byte fails the CRC; a truncated stream fails too', async () => {
    const bad = Buffer.from(both);
    bad[a.length - 6] = (bad[a.length - 6] as number) ^ 0xff;
    await assert.rejects(collect([bad]), /checksum/i);
    await assert.rejects(collect([both.subarray(0, both.length - 3)]), /Truncated/i);
  });
});

describe('SigV4', () => {
  const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
  const signing = { region: 'us-east-1', credentials };
  const origin = 'http://127.0.0.1:9090';
  const path = '/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse';
  const body = '{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}';
  const at = new Date(Date.UTC(2026, 0, 2, 3, 4, 5));

  async function signed(over: Partial<{ body: string; signing: typeof signing }> = {}): Promise<Record<string, string>> {
    return signBedrockRequest(over.signing ?? signing, { origin, path, headers: { 'content-type': 'application/json', 'x-sim-output-tokens': '3' }, body: over.body ?? body }, at);
  }

  const verify = (headers: Record<string, string>, sentBody = body, now = at.getTime(), secrets: Record<string, typeof credentials & { sessionToken?: string }> = { AKIDEXAMPLE: credentials }) =>
    verifyBedrockSignature({ method: 'POST', url: path, headers, body: Buffer.from(sentBody) }, (id) => secrets[id], now);

  test('the signed headers: host, date, payload hash, authorization for service bedrock', async () => {
    const headers = await signed();
    assert.equal(headers.host, '127.0.0.1:9090');
    assert.equal(headers['x-amz-date'], '20260102T030405Z');
    assert.match(headers['x-amz-content-sha256'] ?? '', /^[0-9a-f]{64}$/);
    assert.match(headers.authorization ?? '', /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/20260102\/us-east-1\/bedrock\/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-sim-output-tokens, Signature=[0-9a-f]{64}$/);
  });

  test('a signed request verifies, within 5 minutes either side', async () => {
    const headers = await signed();
    assert.deepEqual(await verify(headers), { ok: true, accessKeyId: 'AKIDEXAMPLE', region: 'us-east-1' });
    assert.equal((await verify(headers, body, at.getTime() + 4 * 60_000)).ok, true);
    assert.equal((await verify(headers, body, at.getTime() - 4 * 60_000)).ok, true);
  });

  test('refusals: another body, another secret, too old, unknown key, missing session token, no header', async () => {
    const headers = await signed();
    assert.equal(((await verify(headers, '{"messages":[]}')) as { kind: string }).kind, 'mismatch');
    assert.equal(((await verify({ ...headers, 'x-amz-content-sha256': '0'.repeat(64) })) as { kind: string }).kind, 'mismatch');
    const other = await signed({ signing: { region: 'us-east-1', credentials: { ...credentials, secretAccessKey: 'other' } } });
    assert.equal(((await verify(other)) as { kind: string }).kind, 'mismatch');
    assert.equal(((await verify(headers, body, at.getTime() + 6 * 60_000)) as { kind: string }).kind, 'expired');
    assert.equal(((await verify(headers, body, at.getTime(), {})) as { kind: string }).kind, 'unknown_key');
    assert.equal(((await verify(headers, body, at.getTime(), { AKIDEXAMPLE: { ...credentials, sessionToken: 'tok' } })) as { kind: string }).kind, 'unknown_key');
    const { authorization: _dropped, ...unsigned } = headers;
    assert.equal(((await verify(unsigned)) as { kind: string }).kind, 'missing');
    const wrongService = { ...headers, authorization: (headers.authorization ?? '').replace('/bedrock/', '/s3/') };
    assert.equal(((await verify(wrongService)) as { kind: string }).kind, 'mismatch');
  });

  test('temporary credentials: the session token is sent, signed and checked', async () => {
    const temporary = { ...credentials, sessionToken: 'FwoGZXIvYXdzEXAMPLETOKEN' };
    const headers = await signed({ signing: { region: 'eu-west-1', credentials: temporary } });
    assert.equal(headers['x-amz-security-token'], temporary.sessionToken);
    assert.match(headers.authorization ?? '', /SignedHeaders=[^,]*x-amz-security-token/);
    assert.deepEqual(await verify(headers, body, at.getTime(), { AKIDEXAMPLE: temporary }), { ok: true, accessKeyId: 'AKIDEXAMPLE', region: 'eu-west-1' });
    assert.equal(((await verify({ ...headers, 'x-amz-security-token': 'other' }, body, at.getTime(), { AKIDEXAMPLE: temporary })) as { kind: string }).kind, 'unknown_key');
  });
});

/**
 * The secret scrubber of relayed upstream content (issue 14, finding 8): the deployment's key and
 * credential shapes are replaced in text, JSON (which stays valid JSON), SSE error events and
 * headers; model output in ordinary events is untouched; 1 MB adversarial bodies are scrubbed in
 * linear time (a quadratic pattern would take minutes on them, the bound below is seconds).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { MAY_HOLD_CREDENTIAL, REDACTED, SHAPES, SecretScrubber } from '../../src/security/scrub.ts';

const KEY = 'prov-key-7f3a9c21';
const scrubber = new SecretScrubber([KEY, undefined, 'abc']);

describe('SecretScrubber.text', () => {
  const cases: { name: string; input: string; expected: string }[] = [
    { name: 'the configured key, anywhere', input: `bad key ${KEY}, and again:${KEY}.`, expected: `bad key ${REDACTED}, and again:${REDACTED}.` },
    { name: 'Bearer token (any case)', input: 'Authorization: Bearer abcdEFGH1234.-_~+/=', expected: `Authorization: Bearer ${REDACTED}` },
    { name: 'lower-case bearer', input: 'got bearer zzzzzzzzzzzz here', expected: `got bearer ${REDACTED} here` },
    { name: 'Basic credentials', input: 'Basic dXNlcjpwYXNzd29yZA==', expected: `Basic ${REDACTED}` },
    { name: 'OpenAI key', input: 'Incorrect API key provided: sk-proj-AbCdEfGhIjKlMnOpQrSt1234.', expected: `Incorrect API key provided: ${REDACTED}.` },
    { name: 'Anthropic key', input: 'key sk-ant-api03-AbCdEfGhIjKlMnOpQrSt_1234-xyz', expected: `key ${REDACTED}` },
    { name: 'AWS access key id', input: 'AKIAIOSFODNN7EXAMPLE is not valid', expected: `${REDACTED} is not valid` },
    { name: 'Google API key', input: 'key AIzaSyA-1234567890abcdefghijklmnopqrstu', expected: `key ${REDACTED}` },
    { name: 'x-api-key header echo', input: 'received x-api-key: hello-world-1', expected: `received x-api-key: ${REDACTED}` },
    { name: 'api-key= value', input: 'api-key=shortish99&x=1', expected: `api-key=${REDACTED}&x=1` },
    { name: 'authorization with a raw key', input: 'authorization=rawkeyvalue', expected: `authorization=${REDACTED}` },
    { name: 'long base64 after key=', input: 'url?key=QUJDREVGR0hJSktMTU5PUFFSU1RVVg==&a=b', expected: `url?key=${REDACTED}&a=b` },
    { name: 'long hex after token=', input: 'token=0123456789abcdef0123456789abcdef', expected: `token=${REDACTED}` },
    { name: 'client_secret=', input: 'client_secret=AAAAAAAAAAAAAAAAAAAA', expected: `client_secret=${REDACTED}` },
    { name: 'URL password', input: 'cannot reach redis://user:s3cr3t@10.0.0.1:6379/0', expected: `cannot reach redis://user:${REDACTED}@10.0.0.1:6379/0` },
    { name: 'JWT', input: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop', expected: REDACTED },
    { name: 'ordinary error text is kept', input: 'Rate limit reached for gpt-4o-mini: Limit 100, Used 99, Requested 5. max_tokens=4096, tokens: 12', expected: 'Rate limit reached for gpt-4o-mini: Limit 100, Used 99, Requested 5. max_tokens=4096, tokens: 12' },
    { name: 'a short configured key is not scrubbed by value (it would match words)', input: 'abc def', expected: 'abc def' },
  ];
  for (const c of cases) test(c.name, () => assert.equal(scrubber.text(c.input), c.expected));

  test('the JSON-escaped and percent-encoded spellings of a key', () => {
    const s = new SecretScrubber(['k/ey"with&odd=chars']);
    assert.equal(s.text('a k/ey\\"with&odd=chars b'), `a ${REDACTED} b`);
    assert.equal(s.text(`q=${encodeURIComponent('k/ey"with&odd=chars')}`), `q=${REDACTED}`);
  });
});

describe('SecretScrubber.body', () => {
  test('JSON: the echoed key in a message, credential-named properties, nested; the result parses', () => {
    const body = JSON.stringify({
      error: { message: `Incorrect API key provided: ${KEY}. Header was Bearer ${KEY}`, type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
      received: { authorization: `Bearer ${KEY}`, 'x-api-key': 'k', api_key: 'whatever', token: 'tk', headers: [['x-api-key', KEY]] },
    });
    const out = scrubber.body(body);
    assert.ok(!out.includes(KEY), out);
    const parsed = JSON.parse(out) as { error: { message: string; code: string }; received: Record<string, unknown> };
    assert.equal(parsed.error.message, `Incorrect API key provided: ${REDACTED}. Header was Bearer ${REDACTED}`);
    assert.equal(parsed.error.code, 'invalid_api_key');
    assert.deepEqual(parsed.received, { authorization: REDACTED, 'x-api-key': REDACTED, api_key: REDACTED, token: REDACTED, headers: [['x-api-key', REDACTED]] });
  });

  test('a clean JSON body is returned byte for byte (formatting kept)', () => {
    const body = '{ "error" : { "message": "Overloaded", "type": "overloaded_error" } }\n';
    assert.equal(scrubber.body(body), body);
  });

  test('text and HTML bodies are scrubbed as text', () => {
    assert.equal(scrubber.body(`<h1>401</h1><p>key ${KEY} rejected</p>`), `<h1>401</h1><p>key ${REDACTED} rejected</p>`);
    assert.equal(scrubber.body(`{"not json ${KEY}`), `{"not json ${REDACTED}`);
  });

  test('JSON nested 20,000 deep (too deep for JSON.stringify) stays valid JSON without the key', () => {
    const depth = 20_000;
    const body = `${'['.repeat(depth)}"Bearer ${KEY}"${']'.repeat(depth)}`;
    const out = scrubber.body(body);
    assert.ok(!out.includes(KEY));
    JSON.parse(out);
  });

  test('a __proto__ property is scrubbed as data', () => {
    const out = scrubber.body(`{"__proto__":{"api_key":"${KEY}"}}`);
    assert.equal(out, `{"__proto__":{"api_key":"${REDACTED}"}}`);
  });

  test('random JSON with secrets sprinkled in stays valid JSON and loses every secret', () => {
    let seed = 7;
    const rnd = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const atoms = [KEY, `Bearer ${KEY}`, 'sk-ant-AbCdEfGhIjKlMnOpQrSt', 'x-api-key: zzzzzzzz', 'token=0123456789abcdef01', '"quoted"', 'back\\slash', 'é ✓ \u0000', 'plain'];
    for (let i = 0; i < 200; i++) {
      const value = (d: number): unknown => {
        const k = rnd(5);
        if (d > 3 || k === 0) return Array.from({ length: rnd(4) }, () => atoms[rnd(atoms.length)]).join(rnd(2) === 0 ? ' ' : '');
        if (k === 1) return rnd(1000);
        if (k === 2) return Array.from({ length: rnd(4) }, () => value(d + 1));
        return Object.fromEntries(Array.from({ length: rnd(4) }, () => [atoms[rnd(atoms.length)] as string, value(d + 1)]));
      };
      const body = JSON.stringify(value(0), null, rnd(2) === 0 ? 2 : undefined);
      const out = scrubber.body(body);
      JSON.parse(out);
      // The text scrub alone must keep JSON valid too (the fallback for bodies too deep to re-serialise).
      JSON.parse(scrubber.text(body));
      for (const leak of [KEY, 'AbCdEfGhIjKlMnOpQrSt', 'zzzzzzzz', '0123456789abcdef01']) assert.ok(!out.includes(leak), out);
    }
  });
});

describe('SecretScrubber.event and headers', () => {
  test('an Anthropic error event is scrubbed; its framing is kept', () => {
    const data = JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: `invalid x-api-key: ${KEY}` } });
    const out = scrubber.event({ raw: `event: error\ndata: ${data}\n\n`, event: 'error', data });
    assert.equal(out.event, 'error');
    assert.ok(!out.raw.includes(KEY));
    assert.match(out.raw, /^event: error\ndata: \{.*\}\n\n$/);
    assert.equal((JSON.parse(out.data) as { error: { message: string } }).error.message, `invalid x-api-key: ${REDACTED}`);
  });

  test('an OpenAI mid-stream error chunk is scrubbed', () => {
    const data = JSON.stringify({ error: { message: `Bearer ${KEY} revoked`, type: 'server_error' } });
    const out = scrubber.event({ raw: `data: ${data}\n\n`, event: '', data });
    assert.equal(out.raw, `data: ${JSON.stringify({ error: { message: `Bearer ${REDACTED} revoked`, type: 'server_error' } })}\n\n`);
  });

  test('model output events are passed as they are, even when they look like keys', () => {
    const data = JSON.stringify({ choices: [{ delta: { content: 'export OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrSt' } }] });
    const event = { raw: `data: ${data}\n\n`, event: '', data };
    assert.equal(scrubber.event(event), event);
  });

  test('headers: values scrubbed, credential headers dropped', () => {
    const headers: Record<string, string> = { 'x-request-id': 'req_1', 'x-echo': `Bearer ${KEY}`, authorization: `Bearer ${KEY}`, 'x-api-key': KEY, 'www-authenticate': 'Bearer realm="api"' };
    scrubber.headers(headers);
    assert.deepEqual(headers, { 'x-request-id': 'req_1', 'x-echo': `Bearer ${REDACTED}`, 'www-authenticate': 'Bearer realm="api"' });
  });
});

describe('linear time on 1 MB adversarial bodies', () => {
  // Each input is built to defeat one pattern: long runs that almost match, start literals repeated,
  // separators that make a backtracking engine retry every split. Quadratic behaviour on 1 MB is
  // ~10^12 steps (hours); linear is milliseconds. The bound leaves room for a loaded machine.
  const MB = 1 << 20;
  const fill = (unit: string): string => unit.repeat(Math.ceil(MB / unit.length)).slice(0, MB);
  const inputs: Record<string, string> = {
    'bearer + spaces': `Bearer${' '.repeat(MB)}`,
    'repeated bearer': fill('Bearer Bearer '),
    'bearer + short tokens': fill('bearer abc '),
    'sk- almost keys': fill('sk-abcdefghijklm '),
    'one long sk run': `sk-${'a'.repeat(MB)}`,
    'key= + spaces, no value': `api-key${' '.repeat(MB / 2)}:${' '.repeat(MB / 2)}`,
    'key: short values': fill('key: abc, token=x, secret= '),
    'api_key quotes and colons': fill(`api_key"': `),
    'URL scheme without userinfo end': `://${'a'.repeat(MB / 2)}:${'b'.repeat(MB / 2)}`,
    'repeated ://': fill('://a:b'),
    'JWT almost': fill('eyJabcdefghij.abcdefghij.'),
    'long word': 'a'.repeat(MB),
    'long hex': fill('0123456789abcdef'),
    'AKIA runs': fill('AKIAABCDEFGHIJKLMNO'),
    'nested JSON strings': JSON.stringify(Array.from({ length: MB / 16 }, () => 'key=0123456789')),
  };
  for (const [name, input] of Object.entries(inputs)) {
    test(name, () => {
      const started = performance.now();
      scrubber.body(input);
      scrubber.text(input);
      const ms = performance.now() - started;
      assert.ok(ms < 5_000, `${name}: ${Math.round(ms)} ms for ${input.length} characters`);
    });
  }
});

describe('the credential pre-check', () => {
  // Fragments of every shape (prefixes, separators, value characters) in mixed case, so random
  // concatenations build matches of each shape and near misses.
  const FRAGMENTS = ['://', 'u:', 'pw@', 'Bearer ', 'bearer\t', 'Basic ', 'sk-', 'sk_', 'AKIA', 'ASIA', 'AIza', 'ghp_', 'gho_', 'xoxb-', 'eyJ', '.', 'api_key', 'X-Api-Key', 'authorization', 'Password', 'passwd', 'key', 'TOKEN', 'secret', 'signature', 'Credential', '=', ': ', '"', "'", 'abcdefghij', 'ABCDEFGHIJKLMNOP', '0123456789', '-_~+/', ' ', '[redacted]'];
  const text = fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 14 }).map((parts) => parts.join(''));

  test('a text the pre-check passes over matches no credential shape', () => {
    fc.assert(
      fc.property(text, (s) => {
        if (MAY_HOLD_CREDENTIAL.test(s)) return;
        for (const shape of SHAPES) assert.equal(new RegExp(shape.pattern.source, shape.pattern.flags.replace('g', '')).test(s), false, `${shape.pattern} matches ${JSON.stringify(s)}`);
      }),
      { numRuns: 3000 },
    );
  });

  test('each shape has a sample the pre-check must let through, and text() scrubs it', () => {
    const scrubber = new SecretScrubber([]);
    const samples = ['https://user:hunter22@host', 'Bearer abcdefghijkl', 'Basic QWxhZGRpbjpvcGVu', 'sk-abcdefghijklmnopqrst', 'AKIAABCDEFGHIJKLMNOP', `AIza${'a'.repeat(35)}`, `ghp_${'a'.repeat(30)}`, 'xoxb-1234567890', 'eyJabcdefgh.abcdefghij.abcdefghij', 'x-api-key: abcdefgh', 'client_secret=abcdefghijklmnopqr'];
    for (const s of samples) {
      assert.ok(MAY_HOLD_CREDENTIAL.test(s), s);
      assert.ok(scrubber.text(s).includes(REDACTED), s);
    }
    assert.equal(SHAPES.length, samples.length);
  });
});

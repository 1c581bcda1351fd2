import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { crc32, deflateSync } from 'node:zlib';
import {
  ANTHROPIC_TOOL_SYSTEM_PROMPT,
  PromptCounter,
  anthropicImageTokens,
  countAnthropicMessages,
  countEmbeddingInput,
  countOpenAIChat,
  encodingForModel,
  estimateCounter,
  exactCounter,
  imageSizeFromBase64,
  openAIImageTokens,
} from '../../src/tokens/index.ts';
import type { OpenAIChatPrompt, SchemaProperty } from '../../src/tokens/index.ts';

const o200k = exactCounter('o200k_base');
const cl100k = exactCounter('cl100k_base');
const ENCODINGS = ['o200k_base', 'cl100k_base'] as const;

/** The OpenAI cookbook's example chat ("How to count tokens with tiktoken"): the API reports 129 (gpt-4) and 124 (gpt-4o). */
const COOKBOOK = [
  { role: 'system', content: 'You are a helpful, pattern-following assistant that translates corporate jargon into plain English.' },
  { role: 'system', name: 'example_user', content: 'New synergies will help drive top-line growth.' },
  { role: 'system', name: 'example_assistant', content: 'Things working well together will increase revenue.' },
  { role: 'system', name: 'example_user', content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage." },
  { role: 'system', name: 'example_assistant', content: "Let's talk later when we're less busy about how to do better." },
  { role: 'user', content: "This late pivot means we don't have time to boil the ocean for the client deliverable." },
];

/** The cookbook's tool example: the API reports 105 (gpt-4) and 101 (gpt-4o). */
const COOKBOOK_TOOLS: OpenAIChatPrompt = {
  messages: [
    { role: 'system', content: 'You are a helpful assistant that can answer to questions about the weather.' },
    { role: 'user', content: "What's the weather like in San Francisco?" },
  ],
  tools: [
    {
      type: 'function',
      function: {
        name: 'get_current_weather',
        description: 'Get the current weather in a given location',
        parameters: {
          properties: {
            location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' },
            unit: { type: 'string', description: 'The unit of temperature to return', enum: ['celsius', 'fahrenheit'] },
          },
        },
      },
    },
  ],
};

/** A complete, valid PNG (signature, IHDR, IDAT, IEND with CRCs) of the given size, as base64. */
function png(width: number, height: number): string {
  const chunk = (type: string, data: Buffer): Buffer => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([len, body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 0, 0, 0, 0], 8); // 8-bit greyscale
  const raw = Buffer.alloc((width + 1) * height); // filter byte 0 + black pixels per row
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]).toString('base64');
}

/** A JPEG header: SOI, JFIF APP0, two 64 KiB APP segments (so the frame header is past 128 KiB), a fill byte, SOF2. */
function jpeg(width: number, height: number): string {
  const seg = (marker: number, payload: Buffer): Buffer => {
    const head = Buffer.from([0xff, marker, 0, 0]);
    head.writeUInt16BE(payload.length + 2, 2);
    return Buffer.concat([head, payload]);
  };
  const sof = Buffer.alloc(15);
  sof.writeUInt8(8, 0);
  sof.writeUInt16BE(height, 1);
  sof.writeUInt16BE(width, 3);
  sof.writeUInt8(3, 5);
  return Buffer.concat([
    Buffer.from([0xff, 0xd8]),
    seg(0xe0, Buffer.from('JFIF\0\x01\x01\0\0\x01\0\x01\0\0', 'latin1')),
    seg(0xe1, Buffer.alloc(65_000, 7)),
    seg(0xe2, Buffer.alloc(65_000, 9)),
    Buffer.from([0xff]),
    seg(0xc2, sof),
    Buffer.from([0xff, 0xd9]),
  ]).toString('base64');
}

const GIF_1X1 = 'R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==';
const WEBP_LOSSLESS_1X1 = 'UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==';
const WEBP_LOSSY_1X1 = 'UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA';

describe('exact counts', () => {
  test('plain text', () => {
    assert.equal(o200k.count('hello world'), 2);
    assert.equal(cl100k.count('hello world'), 2);
    assert.equal(o200k.count(' the'.repeat(500)), 500);
    assert.equal(cl100k.count(' the'.repeat(500)), 500);
    assert.equal(o200k.count(''), 0);
  });
  test('the cookbook chat: 129 (cl100k_base, gpt-4) and 124 (o200k_base, gpt-4o), as the API reports', () => {
    assert.equal(countOpenAIChat({ messages: COOKBOOK }, cl100k), 129);
    assert.equal(countOpenAIChat({ messages: COOKBOOK }, o200k), 124);
  });
  test('the cookbook tool example: 105 (cl100k_base) and 101 (o200k_base), as the API reports', () => {
    assert.equal(countOpenAIChat(COOKBOOK_TOOLS, cl100k), 105);
    assert.equal(countOpenAIChat(COOKBOOK_TOOLS, o200k), 101);
    // Legacy `functions` are counted like tools.
    const fn = COOKBOOK_TOOLS.tools?.[0]?.function;
    assert.ok(fn !== undefined);
    assert.equal(countOpenAIChat({ messages: COOKBOOK_TOOLS.messages ?? [], functions: [fn] }, o200k), 101);
  });
  test('message overhead: 3 per message + role + content, 1 per name, 3 reply priming', () => {
    assert.equal(countOpenAIChat({ messages: [{ role: 'user', content: 'hello world' }] }, o200k), 3 + 1 + 2 + 3);
    assert.equal(countOpenAIChat({ messages: [{ role: 'user', name: 'bob', content: 'hello world' }] }, o200k), 3 + 1 + 2 + 1 + 1 + 3);
    assert.equal(countOpenAIChat({ messages: [] }, o200k), 3);
  });
  test('tool calls and tool results are counted', () => {
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const bare = countOpenAIChat({ messages }, o200k);
    assert.equal(bare, 3 + 1 + 4 + 3);
    const call = { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] };
    const result = { role: 'tool', tool_call_id: 'c1', content: '18 C and sunny' };
    // assistant: 3 + role 1 + call (3 + name 2 + arguments 5); tool: 3 + role 1 + id 2 + content 4
    assert.equal(countOpenAIChat({ messages: [...messages, call, result] }, o200k), bare + (3 + 1 + 3 + 2 + 5) + (3 + 1 + 2 + 4));
  });
  test('nested schema properties are counted by the same per-property rule (beyond the cookbook)', () => {
    const tool = (properties: Record<string, SchemaProperty>) => ({ messages: [], tools: [{ type: 'function', function: { name: 'f', description: 'd', parameters: { properties } } }] });
    const flat = countOpenAIChat(tool({ a: { type: 'object', description: 'A' } }), o200k);
    const nested = countOpenAIChat(tool({ a: { type: 'object', description: 'A', properties: { b: { type: 'string', description: 'B' } } } }), o200k);
    // 3 (property list) + 3 (property) + "b:string:B" (3 tokens)
    assert.equal(nested - flat, 3 + 3 + 3);
  });
  test('embeddings inputs: texts counted, token arrays count their length', () => {
    assert.equal(countEmbeddingInput('hello world', o200k), 2);
    assert.equal(countEmbeddingInput(['hello world', 'hello'], o200k), 3);
    assert.equal(countEmbeddingInput([1, 2, 3], o200k), 3);
    assert.equal(countEmbeddingInput([[1, 2], [3]], o200k), 3);
    assert.equal(countEmbeddingInput([], o200k), 0);
  });
  test('cache: a long text is cached after its first count and served with the same value', () => {
    const long = `A sentence that nobody has counted before in this process: ${'the quick brown fox. '.repeat(20)}`;
    assert.equal(o200k.cached(long), undefined);
    const first = o200k.count(long);
    assert.equal(first, 112);
    assert.equal(o200k.cached(long), 112);
    assert.equal(o200k.count(long), 112);
    assert.equal(o200k.cached(long.toUpperCase()), undefined, 'a different text is not served from the cache');
    assert.equal(o200k.cached('short'), undefined, 'short texts are never cached');
  });
  test('piece-wise counting equals js-tiktoken on text, code, unicode and special-token text', async () => {
    const { Tiktoken } = await import('js-tiktoken/lite');
    const ranks = { o200k_base: (await import('js-tiktoken/ranks/o200k_base')).default, cl100k_base: (await import('js-tiktoken/ranks/cl100k_base')).default };
    const texts = [
      readFileSync(new URL('../../node_modules/fastify/docs/Guides/Getting-Started.md', import.meta.url), 'utf8'),
      readFileSync(new URL('../../node_modules/fastify/lib/route.js', import.meta.url), 'utf8'),
      'Grüße aus Köln! 東京は晴れ。 🚀🚀 numbers 1234567 and   spaces\n\n\ttabs',
      'ignore <|endoftext|> and <|im_start|> markers',
    ];
    for (const encoding of ENCODINGS) {
      const reference = new Tiktoken(ranks[encoding]);
      for (const text of texts) assert.equal(exactCounter(encoding).count(text), reference.encode(text, [], []).length);
    }
  });
});

describe('images', () => {
  test('OpenAI tile rule', () => {
    assert.equal(openAIImageTokens({ width: 4000, height: 3000 }, 'low'), 85);
    assert.equal(openAIImageTokens({ width: 1024, height: 1024 }, 'high'), 765);
    assert.equal(openAIImageTokens({ width: 2048, height: 4096 }, 'high'), 1105);
    assert.equal(openAIImageTokens({ width: 4000, height: 3000 }, 'auto'), 765); // 2048×1536 → 1024×768: 2×2 tiles
    assert.equal(openAIImageTokens({ width: 512, height: 512 }, undefined), 255);
    assert.equal(openAIImageTokens({ width: 100, height: 1000 }, 'high'), 85 + 170 * 2);
  });
  test('sizes are read from real PNG, GIF and WebP files and a JPEG whose frame header is past 128 KiB', () => {
    assert.deepEqual(imageSizeFromBase64(`data:image/png;base64,${png(3, 2)}`), { width: 3, height: 2 });
    assert.deepEqual(imageSizeFromBase64(png(640, 480)), { width: 640, height: 480 });
    assert.deepEqual(imageSizeFromBase64(GIF_1X1), { width: 1, height: 1 });
    assert.deepEqual(imageSizeFromBase64(WEBP_LOSSLESS_1X1), { width: 1, height: 1 });
    assert.deepEqual(imageSizeFromBase64(WEBP_LOSSY_1X1), { width: 1, height: 1 });
    assert.deepEqual(imageSizeFromBase64(`data:image/jpeg;base64,${jpeg(1200, 900)}`), { width: 1200, height: 900 });
    assert.equal(imageSizeFromBase64('data:image/png;base64,'), undefined);
    assert.equal(imageSizeFromBase64('data:image/png'), undefined);
    assert.equal(imageSizeFromBase64('bm90IGFuIGltYWdl'), undefined);
    assert.equal(imageSizeFromBase64(jpeg(10, 10).slice(0, 200)), undefined, 'a cut JPEG');
  });
  test('OpenAI image parts: data URLs by their size, remote URLs as 1024×1024 (765), low detail 85', () => {
    const chat = (url: string, detail?: string) => countOpenAIChat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url, ...(detail === undefined ? {} : { detail }) } }] }] }, o200k);
    const overhead = 3 + 1 + 3;
    assert.equal(chat(`data:image/png;base64,${png(512, 300)}`), overhead + 255);
    assert.equal(chat(`data:image/jpeg;base64,${jpeg(1200, 900)}`, 'high'), overhead + 85 + 170 * 4); // 1024×768
    assert.equal(chat('https://example.com/cat.png'), overhead + 765);
    assert.equal(chat('https://example.com/cat.png', 'low'), overhead + 85);
    const mixed = { messages: [{ role: 'user', content: [{ type: 'text', text: 'hello world' }, { type: 'image_url', image_url: `data:image/gif;base64,${GIF_1X1}` }] }] };
    assert.equal(countOpenAIChat(mixed, o200k), overhead + 2 + 255);
  });
  test('Anthropic: width × height / 750, scaled to a 1568 px long edge and at most 1,600 tokens', () => {
    assert.equal(anthropicImageTokens({ width: 1000, height: 1000 }), 1334);
    assert.equal(anthropicImageTokens({ width: 200, height: 200 }), 54);
    assert.equal(anthropicImageTokens({ width: 1092, height: 1092 }), 1590);
    assert.equal(anthropicImageTokens({ width: 4000, height: 3000 }), 1600);
    assert.equal(anthropicImageTokens({ width: 3136, height: 200 }), 210); // 1568×100 = 156,800 px / 750
    const image = (source: object) => ({ messages: [{ role: 'user', content: [{ type: 'image', source }] }] });
    assert.equal(countAnthropicMessages(image({ type: 'base64', media_type: 'image/png', data: png(200, 200) }), cl100k), 3 + 3 + 54);
    assert.equal(countAnthropicMessages(image({ type: 'url', url: 'https://example.com/cat.png' }), cl100k), 3 + 3 + 1399);
  });
});

describe('Anthropic messages', () => {
  test('hello world is 8 with cl100k_base (3 reply + 3 message + 2 text), string or blocks', () => {
    assert.equal(countAnthropicMessages({ messages: [{ role: 'user', content: 'hello world' }] }, cl100k), 8);
    assert.equal(countAnthropicMessages({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hello world' }] }] }, cl100k), 8);
    assert.equal(countAnthropicMessages({ system: 'hello world', messages: [] }, cl100k), 5);
    assert.equal(countAnthropicMessages({ system: [{ type: 'text', text: 'hello world' }] }, cl100k), 5);
  });
  test('tools: the tool-use system prompt (346 auto, 313 any/tool) + name + description + schema JSON', () => {
    const schema = { type: 'object', properties: { city: { type: 'string' } } };
    const tools = [{ name: 'get_weather', description: 'Get the weather.', input_schema: schema }];
    const defs = cl100k.count('get_weather') + cl100k.count('Get the weather.') + cl100k.count(JSON.stringify(schema));
    assert.equal(countAnthropicMessages({ messages: [], tools }, cl100k), 3 + ANTHROPIC_TOOL_SYSTEM_PROMPT.auto + defs);
    assert.equal(countAnthropicMessages({ messages: [], tools, tool_choice: { type: 'any' } }, cl100k), 3 + 313 + defs);
    assert.equal(ANTHROPIC_TOOL_SYSTEM_PROMPT.auto, 346);
  });
  test('tool_use, tool_result and text documents are counted', () => {
    const body = {
      messages: [
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: '18 C and sunny' }] }] },
        { role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'hello world' }, title: 'Notes' }] },
      ],
    };
    const expected = 3 + (3 + cl100k.count('get_weather') + cl100k.count('{"city":"Paris"}')) + (3 + cl100k.count('18 C and sunny')) + (3 + 2 + cl100k.count('Notes'));
    assert.equal(countAnthropicMessages(body, cl100k), expected);
  });
});

describe('odd shapes never throw', () => {
  test('every kind counts what it can', async () => {
    const counter = new PromptCounter();
    const odd: unknown[] = [null, 'text', 42, [], {}, { messages: 'x' }, { messages: [null, 1, 'a', { content: 5, role: 7 }, { content: [null, { image_url: 3 }, { text: 1 }] }] }, { tools: [null, { function: null }, { function: { parameters: { properties: { a: null, b: { enum: 'x' } } } } }] }, { system: 5, messages: [{ content: [{ type: 'image', source: null }, { type: 'document' }, { type: 'tool_result', content: {} }] }], tools: [5, {}] }];
    for (const body of odd) {
      for (const kind of ['openai_chat', 'anthropic_messages', 'embeddings'] as const) {
        for (const mode of ['estimate', 'exact'] as const) {
          const n = await counter.count(kind, body, { encoding: 'o200k_base', mode });
          assert.ok(Number.isInteger(n) && n >= 0, `${kind} ${mode} ${JSON.stringify(body)}: ${n}`);
        }
      }
    }
    await counter.close();
  });
});

describe('estimate', () => {
  const read = (path: string) => readFileSync(new URL(`../../node_modules/${path}`, import.meta.url), 'utf8');
  const samples = {
    'English docs': read('fastify/docs/Reference/Routes.md'),
    'English prose': read('typescript/ThirdPartyNoticeText.txt').slice(0, 40_000),
    JavaScript: read('fastify/lib/reply.js'),
    TypeScript: read('typescript/lib/lib.es2015.promise.d.ts') + read('undici/types/dispatcher.d.ts'),
    JSON: read('typescript/package.json') + read('fastify/package.json'),
  };
  for (const encoding of ENCODINGS) {
    for (const [kind, text] of Object.entries(samples)) {
      test(`${encoding} ${kind}: within ±15% of exact`, () => {
        const exact = exactCounter(encoding).count(text);
        const est = estimateCounter(encoding).count(text);
        assert.ok(est >= exact * 0.85 && est <= exact * 1.15, `estimate ${est} vs exact ${exact} (${(est / exact).toFixed(3)})`);
      });
    }
    test(`${encoding} Japanese and Chinese: not under-estimated by more than 10% (a chars/4 rule gives about half)`, () => {
      for (const lang of ['ja', 'zh-cn']) {
        const text = Object.values(JSON.parse(read(`typescript/lib/${lang}/diagnosticMessages.generated.json`)) as string[]).slice(0, 300).join('\n');
        const ratio = estimateCounter(encoding).count(text) / exactCounter(encoding).count(text);
        assert.ok(ratio >= 0.9 && ratio <= 1.3, `${lang}: ${ratio.toFixed(3)}`);
      }
    });
  }
  test('pinned values: counts are whole tokens, rounded up; no tokenizer = cl100k_base × 1.1', () => {
    assert.equal(estimateCounter('o200k_base').count(''), 0);
    assert.equal(estimateCounter('o200k_base').count('hello world'), 3);
    assert.equal(estimateCounter('cl100k_base').count('hello world'), 3);
    assert.equal(estimateCounter('o200k_base').count('x'.repeat(35)), 3); // 35 × 0.0658 + 0.6667 = 2.97
    assert.equal(estimateCounter('cl100k_base').count('x'.repeat(350)), 26); // 350 × 0.0719 + 0.6348 = 25.8
    assert.equal(estimateCounter(null).count('x'.repeat(350)), 29); // × 1.1 = 28.4
    assert.equal(estimateCounter(null).name, 'estimate:none');
  });
});

describe('encodings of models', () => {
  test("OpenAI's public mapping", () => {
    assert.equal(encodingForModel('gpt-4o-mini'), 'o200k_base');
    assert.equal(encodingForModel('o3-mini'), 'o200k_base');
    assert.equal(encodingForModel('gpt-4.1'), 'o200k_base');
    assert.equal(encodingForModel('gpt-5-nano'), 'o200k_base');
    assert.equal(encodingForModel('ft:gpt-4o-2024-08-06:acme::abc'), 'o200k_base');
    assert.equal(encodingForModel('gpt-4-turbo'), 'cl100k_base');
    assert.equal(encodingForModel('gpt-3.5-turbo'), 'cl100k_base');
    assert.equal(encodingForModel('gpt-35-turbo'), 'cl100k_base');
    assert.equal(encodingForModel('text-embedding-3-small'), 'cl100k_base');
    assert.equal(encodingForModel('text-embedding-ada-002'), 'cl100k_base');
    assert.equal(encodingForModel('claude-sonnet-4-5'), null);
    assert.equal(encodingForModel('llama-3.1-8b'), null);
  });
});

describe('PromptCounter', () => {
  test('a 100 KB prompt is counted in the worker pool, equal to js-tiktoken, and cached in the worker (not hashed on the event loop)', async () => {
    const counter = new PromptCounter({ workerThresholdChars: 32_768, poolSize: 1 });
    try {
      const big = 'Lorem ipsum dolor sit amet, consectetur adipiscing elit, worker pool. '.repeat(1_450);
      assert.ok(big.length > 100_000);
      const body = { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: big }] };
      const inline = countOpenAIChat(body, exactCounter('cl100k_base', 50_000)); // counted in another encoding's cache: o200k is still cold
      assert.ok(inline > 0);
      assert.equal(o200k.cached(big), undefined);
      const pooled = await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' });
      assert.equal(counter.poolStarted, true);
      assert.equal(o200k.cached(big), undefined, 'a text longer than the threshold is cached by the worker thread that counted it, not hashed on the main thread');
      const bigTokens = new (await import('js-tiktoken/lite')).Tiktoken((await import('js-tiktoken/ranks/o200k_base')).default).encode(big).length;
      assert.equal(pooled, 3 + (3 + 1 + 3) + (3 + 1 + bigTokens));
      assert.equal(await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' }), pooled);
    } finally {
      await counter.close();
    }
  });
  test('a long chat whose history is cached counts only its new message, inline', async () => {
    const counter = new PromptCounter({ workerThresholdChars: 1_000 });
    try {
      const history = Array.from({ length: 8 }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: `Turn ${i}: ${'history that was counted on an earlier turn. '.repeat(10)}` }));
      for (const m of history) o200k.count(m.content); // earlier turns
      const body = { messages: [...history, { role: 'user', content: 'And now?' }] };
      const n = await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' });
      assert.equal(counter.poolStarted, false, '3.6k characters of history but only a few new ones: no worker');
      assert.equal(n, countOpenAIChat(body, o200k));
    } finally {
      await counter.close();
    }
  });
  test('estimate mode and models without an encoding are counted inline with the estimate', async () => {
    const counter = new PromptCounter({ workerThresholdChars: 10 });
    const body = { messages: [{ role: 'user', content: 'x'.repeat(5_000) }] };
    assert.equal(await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'estimate' }), countOpenAIChat(body, estimateCounter('o200k_base')));
    assert.equal(await counter.count('openai_chat', body, { encoding: null, mode: 'exact' }), countOpenAIChat(body, estimateCounter(null)));
    assert.equal(counter.poolStarted, false);
    await counter.close();
  });
});

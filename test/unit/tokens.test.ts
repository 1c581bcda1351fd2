import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import {
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

const o200k = exactCounter('o200k_base');
const cl100k = exactCounter('cl100k_base');

/** The OpenAI cookbook's example chat ("How to count tokens with tiktoken"): 129 prompt tokens for gpt-4. */
const COOKBOOK = [
  { role: 'system', content: 'You are a helpful, pattern-following assistant that translates corporate jargon into plain English.' },
  { role: 'system', name: 'example_user', content: 'New synergies will help drive top-line growth.' },
  { role: 'system', name: 'example_assistant', content: 'Things working well together will increase revenue.' },
  { role: 'system', name: 'example_user', content: "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage." },
  { role: 'system', name: 'example_assistant', content: "Let's talk later when we're less busy about how to do better." },
  { role: 'user', content: "This late pivot means we don't have time to boil the ocean for the client deliverable." },
];

/** A PNG header (signature + IHDR) of the given size, as a data URL. */
function pngDataUrl(width: number, height: number): string {
  const b = Buffer.alloc(33);
  b.writeUInt32BE(0x89504e47, 0);
  b.writeUInt32BE(0x0d0a1a0a, 4);
  b.writeUInt32BE(13, 8);
  b.write('IHDR', 12, 'latin1');
  b.writeUInt32BE(width, 16);
  b.writeUInt32BE(height, 20);
  return `data:image/png;base64,${b.toString('base64')}`;
}

describe('exact counts', () => {
  test('plain text', () => {
    assert.equal(o200k.count('hello world'), 2);
    assert.equal(cl100k.count('hello world'), 2);
    assert.equal(o200k.count(' the'.repeat(500)), 500);
    assert.equal(cl100k.count(' the'.repeat(500)), 500);
  });
  test('the cookbook chat: 129 (cl100k_base, as the cookbook prints for gpt-4), 124 (o200k_base)', () => {
    assert.equal(countOpenAIChat({ messages: COOKBOOK }, cl100k), 129);
    assert.equal(countOpenAIChat({ messages: COOKBOOK }, o200k), 124);
  });
  test('message overhead: 3 per message + role + content, 1 per name, 3 reply priming', () => {
    assert.equal(countOpenAIChat({ messages: [{ role: 'user', content: 'hello world' }] }, o200k), 3 + 1 + 2 + 3);
    assert.equal(countOpenAIChat({ messages: [{ role: 'user', name: 'bob', content: 'hello world' }] }, o200k), 3 + 1 + 2 + 1 + 1 + 3);
  });
  test('tool definitions, tool calls and tool results are counted', () => {
    const tools = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Get the weather.',
          parameters: { properties: { city: { type: 'string', description: 'City name' }, unit: { type: 'string', enum: ['c', 'f'] } } },
        },
      },
    ];
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const bare = countOpenAIChat({ messages }, o200k);
    // 7 + "get_weather:Get the weather" + 3 + (3 + "city:string:City name") + (3 − 3 + 2 × (3 + 1) + "unit:string:") + 12
    const defs = 7 + o200k.count('get_weather:Get the weather') + 3 + 3 + o200k.count('city:string:City name') + 3 - 3 + (3 + 1) * 2 + o200k.count('unit:string:') + 12;
    assert.equal(countOpenAIChat({ messages, tools }, o200k), bare + defs);
    const call = { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] };
    const result = { role: 'tool', tool_call_id: 'c1', content: '18 C and sunny' };
    const withCall = countOpenAIChat({ messages: [...messages, call, result] }, o200k);
    assert.equal(withCall, bare + 3 + 1 + 3 + o200k.count('get_weather') + o200k.count('{"city":"Paris"}') + 3 + 1 + o200k.count('c1') + o200k.count('18 C and sunny'));
  });
  test('embeddings inputs', () => {
    assert.equal(countEmbeddingInput('hello world', o200k), 2);
    assert.equal(countEmbeddingInput(['hello world', 'hello'], o200k), 3);
    assert.equal(countEmbeddingInput([1, 2, 3], o200k), 3);
    assert.equal(countEmbeddingInput([[1, 2], [3]], o200k), 3);
  });
  test('cache: a repeated long message gives the same count', () => {
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(100);
    const first = o200k.count(long);
    assert.equal(o200k.count(long), first);
    assert.equal(first, 1001);
    assert.notEqual(o200k.count(long.toUpperCase()), first, 'a different text is not served from the cache');
  });
});

describe('images', () => {
  test('OpenAI tile rule', () => {
    assert.equal(openAIImageTokens({ width: 4000, height: 3000 }, 'low'), 85);
    assert.equal(openAIImageTokens({ width: 1024, height: 1024 }, 'high'), 765);
    assert.equal(openAIImageTokens({ width: 2048, height: 4096 }, 'high'), 1105);
    assert.equal(openAIImageTokens({ width: 512, height: 512 }, 'auto'), 255);
  });
  test('image sizes are read from data URLs; unknown URLs cost a 1024×1024 image', () => {
    assert.deepEqual(imageSizeFromBase64(pngDataUrl(512, 300)), { width: 512, height: 300 });
    const chat = (url: string, detail?: string) => countOpenAIChat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url, ...(detail === undefined ? {} : { detail }) } }] }] }, o200k);
    const overhead = 3 + 1 + 3;
    assert.equal(chat(pngDataUrl(512, 300)), overhead + 255);
    assert.equal(chat('https://example.com/cat.png'), overhead + 765);
    assert.equal(chat('https://example.com/cat.png', 'low'), overhead + 85);
  });
  test('Anthropic: width × height / 750 after downscaling', () => {
    assert.equal(anthropicImageTokens({ width: 1000, height: 1000 }), 1334);
    assert.equal(anthropicImageTokens({ width: 200, height: 200 }), 54);
    // 4000×3000 scales to fit 1568 px and ~1.15 MP: 1,150,000 / 750
    assert.equal(anthropicImageTokens({ width: 4000, height: 3000 }), 1534);
    const msg = { messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: pngDataUrl(200, 200).split(',')[1] ?? '' } }] }] };
    assert.equal(countAnthropicMessages(msg, cl100k), 3 + 3 + 54);
  });
});

describe('estimate', () => {
  const samples = {
    prose: readFileSync(new URL('../../README.md', import.meta.url), 'utf8'),
    code: readFileSync(new URL('../../src/gateway/exchange.ts', import.meta.url), 'utf8'),
  };
  for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
    for (const [kind, text] of Object.entries(samples)) {
      test(`${encoding} ${kind}: within −15% / +25% of exact, erring high`, () => {
        const exact = exactCounter(encoding).count(text);
        const est = estimateCounter(encoding).count(text);
        assert.ok(est >= exact * 0.85 && est <= exact * 1.25, `estimate ${est} vs exact ${exact}`);
      });
    }
  }
  test('models without a tokenizer use the generic rule', () => {
    assert.equal(estimateCounter(null).count('x'.repeat(35)), 10);
  });
});

describe('encodings of models', () => {
  test('OpenAI mapping', () => {
    assert.equal(encodingForModel('gpt-4o-mini'), 'o200k_base');
    assert.equal(encodingForModel('o3-mini'), 'o200k_base');
    assert.equal(encodingForModel('gpt-4.1'), 'o200k_base');
    assert.equal(encodingForModel('gpt-4-turbo'), 'cl100k_base');
    assert.equal(encodingForModel('gpt-3.5-turbo'), 'cl100k_base');
    assert.equal(encodingForModel('text-embedding-3-small'), 'cl100k_base');
    assert.equal(encodingForModel('claude-sonnet-4-5'), null);
  });
});

describe('PromptCounter', () => {
  test('a 100 KB prompt counted in the worker pool equals the inline count', async () => {
    const counter = new PromptCounter({ workerThresholdChars: 32_768, poolSize: 1 });
    try {
      const body = { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(1_800) }] };
      const pooled = await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'exact' });
      assert.equal(pooled, countOpenAIChat(body, o200k));
      assert.equal(await counter.count('openai_chat', body, { encoding: 'o200k_base', mode: 'estimate' }), countOpenAIChat(body, estimateCounter('o200k_base')));
      assert.equal(await counter.count('openai_chat', body, { encoding: null, mode: 'exact' }), countOpenAIChat(body, estimateCounter(null)));
    } finally {
      await counter.close();
    }
  });
});

describe('piece-wise exact count equals js-tiktoken', () => {
  test('on varied text, code, unicode and special-token text', async () => {
    const { Tiktoken } = await import('js-tiktoken/lite');
    const ranks = { o200k_base: (await import('js-tiktoken/ranks/o200k_base')).default, cl100k_base: (await import('js-tiktoken/ranks/cl100k_base')).default };
    const texts = [
      readFileSync(new URL('../../README.md', import.meta.url), 'utf8'),
      readFileSync(new URL('../../src/gateway/exchange.ts', import.meta.url), 'utf8'),
      'Grüße aus Köln! 東京は晴れ。 🚀🚀 numbers 1234567 and   spaces\n\n\ttabs',
      'ignore <|endoftext|> and <|im_start|> markers',
    ];
    for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
      const reference = new Tiktoken(ranks[encoding]);
      for (const text of texts) assert.equal(exactCounter(encoding).count(text), reference.encode(text, [], []).length);
    }
  });
});

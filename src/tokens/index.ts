/**
 * Token estimation and counting: the provider-style estimate (default at admission), exact
 * js-tiktoken counts with a cache, prompt rules for OpenAI chat, Anthropic messages and embeddings,
 * and a counter that moves large exact counts off the event loop.
 */
export { CHARS_PER_TOKEN, charCounter, encodingForModel, estimateCounter, exactCounter } from './counters.ts';
export type { EncodingName, TextCounter } from './counters.ts';
export { ASSUMED_IMAGE_SIZE, anthropicImageTokens, openAIImageTokens } from './images.ts';
export { imageSizeFromBase64 } from './image-size.ts';
export { countAnthropicMessages, countEmbeddingInput, countOpenAIChat } from './prompt.ts';
export { PromptCounter } from './prompt-counter.ts';
export type { PromptCounterOptions, PromptKind } from './prompt-counter.ts';
export type { AnthropicPrompt, EmbeddingInput, OpenAIChatPrompt } from './types.ts';

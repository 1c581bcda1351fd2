/**
 * Token estimation and counting: the calibrated character estimate (default at admission), exact
 * js-tiktoken counts with a content-hash cache, prompt rules for OpenAI chat, Anthropic messages and
 * embeddings, and a counter that moves large exact counts off the event loop.
 */
export { charCounter, encodingForModel } from './encoding.ts';
export type { EncodingName, TextCounter } from './encoding.ts';
export { NO_TOKENIZER_FACTOR, estimateCounter } from './estimate.ts';
export { CACHE_MIN_CHARS, ExactCounter, byteBound, exactCounter, mergeBudget } from './exact.ts';
export type { BudgetedCount, MergeBudget } from './exact.ts';
export { ANTHROPIC_MAX_IMAGE_TOKENS, ASSUMED_IMAGE_SIZE, anthropicImageTokens, openAIImageTokens, openAIImageUrlTokens } from './images.ts';
export { imageSizeFromBase64 } from './image-size.ts';
export type { ImageSize } from './image-size.ts';
export { ANTHROPIC_TOOL_SYSTEM_PROMPT, countAnthropicMessages, countEmbeddingInput, countOpenAIChat } from './prompt.ts';
export { PromptCounter } from './prompt-counter.ts';
export type { PromptCounterOptions, PromptKind } from './prompt-counter.ts';
export type { AnthropicBlock, AnthropicPrompt, EmbeddingInput, FunctionDefinition, OpenAIChatPrompt, OpenAIContentPart, OpenAIMessage, SchemaProperty } from './types.ts';

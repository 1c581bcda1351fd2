/**
 * Wire-format translation between OpenAI Chat Completions and Anthropic Messages, for failover to
 * a deployment of the other provider: requests, JSON replies and SSE streams. Pure functions and
 * small stateful stream translators; no I/O. See each module for the mapping and what is not translated.
 */
export { TranslationError, openAIChatToAnthropic, openAIResponseToAnthropic } from './openai-to-anthropic.ts';
export { anthropicToOpenAIChat, anthropicResponseToOpenAI } from './anthropic-to-openai.ts';
export { AnthropicToOpenAIStream, OpenAIToAnthropicStream } from './streams.ts';

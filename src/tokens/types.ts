/**
 * Minimal structural types of the request fields that token counting reads. Bodies are validated
 * JSON from clients: every field is optional, extra fields are ignored, and odd shapes (null,
 * numbers where strings belong) are skipped rather than rejected.
 */

/** An OpenAI content part: text, an image by URL (data URLs are sized from their header), or a refusal. */
export interface OpenAIContentPart {
  readonly type?: string;
  readonly text?: string;
  readonly refusal?: string;
  readonly image_url?: { readonly url?: string; readonly detail?: string } | string;
}

/** An OpenAI chat message. */
export interface OpenAIMessage {
  readonly role?: string;
  readonly name?: string;
  readonly content?: string | readonly OpenAIContentPart[] | null;
  readonly tool_calls?: readonly { readonly function?: { readonly name?: string; readonly arguments?: string } }[];
  readonly tool_call_id?: string;
  readonly function_call?: { readonly name?: string; readonly arguments?: string };
}

/** A JSON-schema property as far as the tool-definition rule reads it. */
export interface SchemaProperty {
  readonly type?: unknown;
  readonly description?: string;
  readonly enum?: readonly unknown[];
  /** Properties of a nested object. */
  readonly properties?: Readonly<Record<string, SchemaProperty>>;
  /** Item schema of an array. */
  readonly items?: SchemaProperty;
}

/** A function definition (OpenAI `tools[].function` or legacy `functions[]`). */
export interface FunctionDefinition {
  readonly name?: string;
  readonly description?: string;
  readonly parameters?: { readonly properties?: Readonly<Record<string, SchemaProperty>> };
}

/** The prompt fields of an OpenAI chat completion body. */
export interface OpenAIChatPrompt {
  readonly messages?: readonly OpenAIMessage[];
  readonly tools?: readonly { readonly type?: string; readonly function?: FunctionDefinition }[];
  readonly functions?: readonly FunctionDefinition[];
}

/**
 * An Anthropic content block: `text`, `image` (source base64 `data`, or a URL), `tool_use`
 * (name, input), `tool_result` (content), `document` (source text/base64/content, title, context).
 */
export interface AnthropicBlock {
  readonly type?: string;
  readonly text?: string;
  readonly source?: {
    readonly type?: string;
    readonly media_type?: string;
    readonly data?: string;
    readonly content?: string | readonly AnthropicBlock[];
  };
  readonly name?: string;
  readonly input?: unknown;
  readonly content?: string | readonly AnthropicBlock[];
  readonly title?: string;
  readonly context?: string;
}

/** The prompt fields of an Anthropic /v1/messages body. */
export interface AnthropicPrompt {
  readonly system?: string | readonly AnthropicBlock[];
  readonly messages?: readonly { readonly role?: string; readonly content?: string | readonly AnthropicBlock[] }[];
  readonly tools?: readonly { readonly type?: string; readonly name?: string; readonly description?: string; readonly input_schema?: unknown }[];
  readonly tool_choice?: { readonly type?: string };
}

/** OpenAI embeddings `input`: text, texts, a token array or token arrays. */
export type EmbeddingInput = string | readonly string[] | readonly number[] | readonly (readonly number[])[];

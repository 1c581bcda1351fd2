/**
 * Tokenizer names, the text-counter contract, and which tokenizer an OpenAI model uses.
 */

/** Tokenizers quotaring can count exactly (js-tiktoken vocabularies). */
export type EncodingName = 'o200k_base' | 'cl100k_base';

/** Counts tokens of a plain string. */
export interface TextCounter {
  /** `estimate:<encoding|none>`, `exact:<encoding>` or `chars`; rules that differ per tokenizer read the suffix. */
  readonly name: string;
  /** Tokens of `text` (≥ 0; 0 for the empty string). */
  count(text: string): number;
}

/** Counts characters: sizes a prompt before choosing where to count it. */
export const charCounter: TextCounter = { name: 'chars', count: (text) => text.length };

const O200K = /^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o|gpt-oss|codex-)/;
const CL100K = /^(gpt-4|gpt-3\.5|gpt-35|text-embedding-3|text-embedding-ada-002|davinci-002|babbage-002)/;

/**
 * Encoding of a model name by OpenAI's public mapping (tiktoken `model.py`,
 * MODEL_PREFIX_TO_ENCODING / MODEL_TO_ENCODING): gpt-4o*, gpt-4.1*, gpt-4.5*, gpt-5*, o1*, o3*, o4*,
 * chatgpt-4o*, gpt-oss*, codex-* → o200k_base; gpt-4*, gpt-3.5* (Azure `gpt-35*`),
 * text-embedding-3*, text-embedding-ada-002, davinci-002, babbage-002 → cl100k_base; anything else
 * (Claude, open models) → null. Case-insensitive; a fine-tune prefix `ft:` is ignored.
 */
export function encodingForModel(model: string): EncodingName | null {
  let m = model.toLowerCase();
  if (m.startsWith('ft:')) m = m.slice(3);
  if (O200K.test(m)) return 'o200k_base';
  if (CL100K.test(m)) return 'cl100k_base';
  return null;
}

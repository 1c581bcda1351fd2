/**
 * The `models:` section: the models clients name, with their tokenizer, counting mode, output
 * reservation, deployments (in order of preference), prices and weights.
 */
import { z } from 'zod';
import { PriceSchema } from './schema-prices.ts';
import { positiveInt } from './units.ts';

/** Tokenizers a model may name; `none` = no public tokenizer. */
export const ENCODINGS = ['o200k_base', 'cl100k_base', 'none'] as const;
/** Prompt counting modes at admission. */
export const ESTIMATORS = ['estimate', 'exact'] as const;

/** A model clients name: tokenizer, counting mode, default output reservation, deployments. */
export const ModelSchema = z.strictObject({
  name: z.string().min(1),
  /** Tokenizer of the model; `none` = no public tokenizer (character estimate only). */
  encoding: z.enum(ENCODINGS),
  /** Prompt counting at admission. @default estimate */
  estimator: z.enum(ESTIMATORS).default('estimate'),
  /** Output reserved when a request sets no max_tokens, in tokens. @default 4096 */
  default_max_output: positiveInt.default(4096),
  /**
   * Prompt tokens reserved at admission for each piece of context a Responses request names but does
   * not carry (`previous_response_id` this node has not seen answered, `conversation`, a stored
   * `prompt`, a file or image by `file_id`, an `item_reference`); settlement uses the provider's
   * reported usage either way. @default 4096
   */
  stored_context_tokens: z.number().int().min(0).default(4096),
  /** Deployment names, in order of preference (failover follows this order). */
  deployments: z.array(z.string().min(1)).min(1),
  /** Prices of this model, USD per million tokens (what cost limits charge). A deployment's own `prices` replace them for the requests it serves. @default none */
  prices: PriceSchema.optional(),
  /**
   * Relative weights, one per deployment: new requests are spread over the deployments of the
   * endpoint's format in these proportions (smooth weighted round-robin, skipping a deployment whose
   * quota is spent) instead of going to the one with the most headroom. @default none (headroom)
   */
  weights: z.array(z.number().int('weights: whole numbers from 0 to 1000').min(0, 'weights: whole numbers from 0 to 1000').max(1_000, 'weights: whole numbers from 0 to 1000')).optional(),
});

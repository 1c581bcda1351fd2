/**
 * AWS Bedrock's Converse API: requests of either client format, always translated
 * (`src/providers/translate/*bedrock*`); signed with SigV4 unless an API key is set. A
 * ThrottlingException names no wait: the first retry waits 1 s, doubled at each retry (AWS's
 * advice is exponential backoff, https://docs.aws.amazon.com/bedrock/latest/userguide/troubleshooting-api-error-codes.html).
 */
import { DEFAULT_ADAPTER } from '../adapter.ts';
import type { ProviderAdapter } from '../adapter.ts';

/** Bedrock's rules: the `bedrock` wire format (always translated), a 1,000 ms first backoff for a 429 without a wait. */
export const bedrockAdapter: ProviderAdapter = {
  ...DEFAULT_ADAPTER,
  wireFormat: 'bedrock',
  defaultRetryBackoffMs: 1_000,
};

/**
 * Checks of the few request fields the gateway relies on. Each throws a `GatewayError`
 * (`invalid_request`, 400) naming the field; the rest of the body is the provider's business.
 */
import { GatewayError } from '../errors.ts';

/** A parsed JSON body seen as a record. @throws GatewayError when the body is not a JSON object. */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GatewayError('invalid_request', 'The request body must be a JSON object.');
  }
  return body as Record<string, unknown>;
}

/** A required non-empty string field. @throws GatewayError when missing or not a string. */
export function requiredString(body: Record<string, unknown>, field: string): string {
  const value = body[field];
  if (typeof value !== 'string' || value.length === 0) {
    throw new GatewayError('invalid_request', `"${field}" is required and must be a non-empty string.`, field);
  }
  return value;
}

/** A required non-empty array field. @throws GatewayError when missing, empty, or holding a non-object. */
export function requiredObjectArray(body: Record<string, unknown>, field: string): readonly Record<string, unknown>[] {
  const value = body[field];
  if (!Array.isArray(value) || value.length === 0) {
    throw new GatewayError('invalid_request', `"${field}" is required and must be a non-empty array.`, field);
  }
  for (let i = 0; i < value.length; i++) {
    const item: unknown = value[i];
    if (item === null || typeof item !== 'object' || Array.isArray(item)) {
      throw new GatewayError('invalid_request', `"${field}[${i}]" must be an object.`, `${field}[${i}]`);
    }
  }
  return value as Record<string, unknown>[];
}

/**
 * An optional positive integer (absent or null → undefined), e.g. `max_tokens` (tokens).
 * @param max largest accepted value. @throws GatewayError when not an integer in [1, max].
 */
export function optionalPositiveInt(body: Record<string, unknown>, field: string, max = 10_000_000): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new GatewayError('invalid_request', `"${field}" must be an integer from 1 to ${max}.`, field);
  }
  return value;
}

/** An optional boolean (absent or null → `fallback`). @throws GatewayError when another type. */
export function optionalBoolean(body: Record<string, unknown>, field: string, fallback = false): boolean {
  const value = body[field];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw new GatewayError('invalid_request', `"${field}" must be a boolean.`, field);
  return value;
}

/** Most items accepted in the arrays the gateway walks: `server.max_messages` and `server.max_tools`. */
export interface ItemLimits {
  /** Most `messages`. @default 10000 */
  readonly messages: number;
  /** Most tool definitions (`tools`; `functions` counted apart). @default 512 */
  readonly tools: number;
}

/** The config's defaults of {@link ItemLimits}. */
export const DEFAULT_ITEM_LIMITS: ItemLimits = { messages: 10_000, tools: 512 };

/**
 * Refuses an array field with more than `max` items (absent or not an array: nothing to check).
 * @param setting the config key that sets `max`, named in the message. @throws GatewayError `invalid_request` naming the field.
 */
export function atMostItems(body: Record<string, unknown>, field: string, max: number, setting: string): void {
  const value = body[field];
  if (Array.isArray(value) && value.length > max) {
    throw new GatewayError('invalid_request', `"${field}" has ${value.length} items; at most ${max} are accepted (${setting}).`, field);
  }
}

/**
 * Serialization of HTTP Structured Field Values (RFC 9651), the part the IETF RateLimit header
 * fields need: a List of Items whose bare items are Strings, Integers, Tokens or Byte Sequences,
 * each with Parameters. Parsing is not needed (quotaring only sends these fields).
 */

/** A Token (RFC 9651 §3.3.4), e.g. `foo`; a plain JS string is serialized as a String instead. */
export interface SfToken {
  readonly token: string;
}

/** A Byte Sequence (RFC 9651 §3.3.5), serialized as `:base64:`. */
export interface SfBytes {
  readonly bytes: Uint8Array;
}

/** A bare item: String (JS string), Integer (JS integer), Token, Byte Sequence or Boolean. */
export type SfBareItem = string | number | boolean | SfToken | SfBytes;

/** An Item with its Parameters, in order (RFC 9651 §3.3, §3.1.2). */
export interface SfItem {
  readonly value: SfBareItem;
  readonly params?: readonly (readonly [string, SfBareItem])[];
}

const KEY = /^[a-z*][a-z0-9_\-.*]*$/;
const TOKEN = /^[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*$/;
const MAX_INTEGER = 999_999_999_999_999;

/**
 * Serializes a bare item (RFC 9651 §4.1.3). Integers must be whole and within ±999,999,999,999,999
 * (§4.1.4); Strings printable ASCII only, `"` and `\` escaped (§4.1.6); Tokens per §4.1.7.
 * @throws Error on a value the format cannot carry (a fault of the caller, not of input).
 */
export function serializeBareItem(v: SfBareItem): string {
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || Math.abs(v) > MAX_INTEGER) throw new Error(`structured field: not an Integer: ${v}`);
    return String(v);
  }
  if (typeof v === 'boolean') return v ? '?1' : '?0';
  if (typeof v === 'string') {
    if (/[^\x20-\x7e]/.test(v)) throw new Error('structured field: a String must be printable ASCII');
    return `"${v.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
  }
  if ('token' in v) {
    if (!TOKEN.test(v.token)) throw new Error(`structured field: not a Token: ${v.token}`);
    return v.token;
  }
  return `:${Buffer.from(v.bytes).toString('base64')}:`;
}

/** Serializes an Item with its Parameters (RFC 9651 §4.1.3, §4.1.1.2); a Boolean true parameter is written as its bare key. */
export function serializeItem(item: SfItem): string {
  let out = serializeBareItem(item.value);
  for (const [key, value] of item.params ?? []) {
    if (!KEY.test(key)) throw new Error(`structured field: not a parameter key: ${key}`);
    out += value === true ? `;${key}` : `;${key}=${serializeBareItem(value)}`;
  }
  return out;
}

/** Serializes a List of Items (RFC 9651 §4.1.1): members joined by `, `. An empty list is an empty string (the field is then not sent). */
export function serializeList(items: readonly SfItem[]): string {
  return items.map(serializeItem).join(', ');
}

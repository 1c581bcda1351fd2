/**
 * Minimal validation of request bodies and simulator headers. A failure is a message (the route
 * answers 400 in its provider's shape), never an exception.
 */

/** A JSON object body. */
export type JsonObject = Record<string, unknown>;

/** Whether `v` is a plain JSON object (not null, not an array). */
export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A field that failed validation: the message and the field's name (OpenAI's `param`). */
export interface FieldError {
  readonly message: string;
  readonly param: string | null;
}

/** `body.model` when it is a non-empty string, else a FieldError. */
export function readModel(body: unknown): string | FieldError {
  if (!isJsonObject(body)) return { message: 'The request body must be a JSON object.', param: null };
  const model = body['model'];
  if (typeof model !== 'string' || model === '') return { message: 'you must provide a model parameter', param: 'model' };
  return model;
}

/**
 * The output cap of a body: the first of `names` that is present and not null.
 * @returns undefined when none is given; a FieldError when it is not an integer ≥ 1.
 */
export function readCap(body: JsonObject, names: readonly string[]): number | undefined | FieldError {
  for (const name of names) {
    const v = body[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) {
      return { message: `Invalid '${name}': expected an integer ≥ 1, got ${JSON.stringify(v)}.`, param: name };
    }
    return v;
  }
  return undefined;
}

/**
 * Parses a ms header (`x-sim-ttft-ms`): undefined when absent, a number ≥ 0, or a FieldError.
 */
export function readMsHeader(name: string, v: string | string[] | undefined): number | undefined | FieldError {
  const raw = Array.isArray(v) ? v[0] : v;
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (raw.trim() === '' || !(n >= 0 && n < Infinity)) return { message: `${name} must be a number of ms ≥ 0, got "${raw}"`, param: null };
  return n;
}

/** The first value of a header. */
export function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Whether `v` is a FieldError. */
export function isFieldError(v: unknown): v is FieldError {
  return typeof v === 'object' && v !== null && 'message' in v && 'param' in v;
}

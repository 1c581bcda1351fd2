/**
 * The only request body parser: JSON, checked to be valid UTF-8 before parsing, so that bad bytes
 * get a clear 400 instead of being silently replaced.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { GatewayError } from '../errors.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The JSON body's bytes, forwarded as they are when the gateway changes nothing in the body. */
    rawBody: Buffer | null;
  }
  interface FastifyContextConfig {
    /** A POST route that takes no body (`/v1/responses/{id}/cancel`): an empty JSON body is no body. */
    noBody?: boolean;
  }
}

/** Whether `request`'s route takes no body: every GET, HEAD and DELETE, and POST routes marked `config.noBody`. */
function takesNoBody(request: FastifyRequest): boolean {
  return request.method !== 'POST' || request.routeOptions.config.noBody === true;
}

/** What {@link jsonShapeFault} found wrong with a JSON text's shape. */
export type JsonShapeFault = 'depth' | 'members';

/**
 * Whether JSON text nests arrays and objects deeper than `maxDepth`, or has more than `maxMembers`
 * members: one linear pass over the bytes, counting brackets, `:` and `,` outside strings (strings
 * are skipped with `indexOf`, so prompt text costs a memchr). Garbage is not judged here: JSON.parse
 * refuses it after.
 *
 * Members are what JSON.parse allocates for: every key (a `:`) and every array element or object
 * entry after the first of its container (a `,`), except array elements that are numbers (a `,`
 * followed by a digit or `-`): those parse without allocation, 700,000 of them in 12 ms, and a legit
 * embeddings request carries up to 300,000 token ids. On this machine JSON.parse of 280,000 keys
 * takes ~100 ms, of 1,000,000 empty objects ~130 ms; bounding the members bounds a request's parse.
 * @param maxDepth deepest accepted nesting (1 = a flat object or array).
 * @param maxMembers most members accepted. @default Infinity
 * @returns the first fault found, or undefined.
 */
export function jsonShapeFault(bytes: Uint8Array, maxDepth: number, maxMembers = Number.POSITIVE_INFINITY): JsonShapeFault | undefined {
  let depth = 0;
  let members = 0;
  const n = bytes.length;
  for (let i = 0; i < n; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      // The closing quote is the next one not escaped by an odd run of backslashes.
      let j = i;
      for (;;) {
        j = bytes.indexOf(QUOTE, j + 1);
        if (j === -1) return undefined;
        let backslashes = 0;
        while (bytes[j - 1 - backslashes] === BACKSLASH) backslashes++;
        if ((backslashes & 1) === 0) break;
      }
      i = j;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return 'depth';
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    } else if (c === COLON) {
      if (++members > maxMembers) return 'members';
    } else if (c === COMMA) {
      let j = i + 1;
      let next = bytes[j];
      while (next === SPACE || next === NEWLINE || next === TAB || next === RETURN) next = bytes[++j];
      if (next !== undefined && (next === MINUS || (next >= DIGIT_0 && next <= DIGIT_9))) continue;
      if (++members > maxMembers) return 'members';
    }
  }
  return undefined;
}

/**
 * Whether JSON text nests arrays and objects deeper than `maxDepth` (see {@link jsonShapeFault}).
 * @param maxDepth deepest accepted nesting (1 = a flat object or array).
 */
export function nestsDeeperThan(bytes: Uint8Array, maxDepth: number): boolean {
  return jsonShapeFault(bytes, maxDepth) === 'depth';
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const COLON = 0x3a;
const COMMA = 0x2c;
const SPACE = 0x20;
const NEWLINE = 0x0a;
const TAB = 0x09;
const RETURN = 0x0d;
const MINUS = 0x2d;
const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;

/**
 * Replaces fastify's parsers with one for `application/json` (any charset parameter); any other
 * content type gets 415 from fastify. An empty body is `undefined` (no body) on a route that takes
 * none (GET, DELETE, a POST marked `config.noBody`), else 400 `invalid_json`. Bodies nested deeper than `maxDepth` get 400
 * `invalid_request` before they are parsed (a deep body costs many times its size in heap, and
 * JSON.stringify of it overflows the stack); so do bodies with more than `maxMembers` members (keys
 * and non-number array elements: each costs JSON.parse an allocation, and a 3 MB body of 280,000
 * keys blocks the event loop ~100 ms — every tenant of the node waits, and its health checks too).
 * @param bodyLimit bytes; larger bodies get 413. @param maxDepth `server.json_depth`.
 * @param maxMembers `server.json_max_members`. @default Infinity
 */
export function registerJsonBody(app: FastifyInstance, bodyLimit: number, maxDepth: number, maxMembers = Number.POSITIVE_INFINITY): void {
  app.removeAllContentTypeParsers();
  app.decorateRequest('rawBody', null);
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, (request, body, done) => {
    const bytes = body as Buffer;
    request.rawBody = bytes;
    // An empty body on a route that takes none is no body (`undefined`), whatever its content type:
    // the Python SDKs send `content-type: application/json` with nothing on DELETE and cancel.
    if (bytes.length === 0) {
      if (takesNoBody(request)) done(null, undefined);
      else done(new GatewayError('invalid_json', 'The request body is empty: this route needs a JSON object.'), undefined);
      return;
    }
    if (!isUtf8(bytes)) {
      done(new GatewayError('invalid_encoding'), undefined);
      return;
    }
    const fault = jsonShapeFault(bytes, maxDepth, maxMembers);
    if (fault === 'depth') {
      done(new GatewayError('invalid_request', `The JSON body nests arrays and objects deeper than ${maxDepth} levels (server.json_depth).`), undefined);
      return;
    }
    if (fault === 'members') {
      done(new GatewayError('invalid_request', `The JSON body has more than ${maxMembers} keys and non-number array elements (server.json_max_members).`), undefined);
      return;
    }
    try {
      done(null, JSON.parse(bytes.toString('utf8')));
    } catch (err) {
      done(new GatewayError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });
}

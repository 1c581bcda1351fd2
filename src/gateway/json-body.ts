/**
 * The only request body parser: JSON, checked to be valid UTF-8 before parsing, so that bad bytes
 * get a clear 400 instead of being silently replaced.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance } from 'fastify';
import { GatewayError } from '../errors.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The JSON body's bytes, forwarded as they are when the gateway changes nothing in the body. */
    rawBody: Buffer | null;
  }
}

/**
 * Whether JSON text nests arrays and objects deeper than `maxDepth`: one linear pass over the bytes,
 * counting brackets outside strings (strings are skipped with `indexOf`, so prompt text costs a
 * memchr). Garbage is not judged here: JSON.parse refuses it after.
 * @param maxDepth deepest accepted nesting (1 = a flat object or array).
 */
export function nestsDeeperThan(bytes: Uint8Array, maxDepth: number): boolean {
  let depth = 0;
  const n = bytes.length;
  for (let i = 0; i < n; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      // The closing quote is the next one not escaped by an odd run of backslashes.
      let j = i;
      for (;;) {
        j = bytes.indexOf(QUOTE, j + 1);
        if (j === -1) return false;
        let backslashes = 0;
        while (bytes[j - 1 - backslashes] === BACKSLASH) backslashes++;
        if ((backslashes & 1) === 0) break;
      }
      i = j;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (++depth > maxDepth) return true;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
    }
  }
  return false;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * Replaces fastify's parsers with one for `application/json` (any charset parameter); any other
 * content type gets 415 from fastify. Bodies nested deeper than `maxDepth` get 400
 * `invalid_request` before they are parsed (a deep body costs many times its size in heap, and
 * JSON.stringify of it overflows the stack).
 * @param bodyLimit bytes; larger bodies get 413. @param maxDepth `server.json_depth`.
 */
export function registerJsonBody(app: FastifyInstance, bodyLimit: number, maxDepth: number): void {
  app.removeAllContentTypeParsers();
  app.decorateRequest('rawBody', null);
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, (request, body, done) => {
    const bytes = body as Buffer;
    request.rawBody = bytes;
    if (!isUtf8(bytes)) {
      done(new GatewayError('invalid_encoding'), undefined);
      return;
    }
    if (nestsDeeperThan(bytes, maxDepth)) {
      done(new GatewayError('invalid_request', `The JSON body nests arrays and objects deeper than ${maxDepth} levels (server.json_depth).`), undefined);
      return;
    }
    try {
      done(null, JSON.parse(bytes.toString('utf8')));
    } catch (err) {
      done(new GatewayError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });
}

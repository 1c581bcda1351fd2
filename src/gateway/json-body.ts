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
 * Replaces fastify's parsers with one for `application/json` (any charset parameter); any other
 * content type gets 415 from fastify. @param bodyLimit bytes; larger bodies get 413.
 */
export function registerJsonBody(app: FastifyInstance, bodyLimit: number): void {
  app.removeAllContentTypeParsers();
  app.decorateRequest('rawBody', null);
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, (request, body, done) => {
    const bytes = body as Buffer;
    request.rawBody = bytes;
    if (!isUtf8(bytes)) {
      done(new GatewayError('invalid_encoding'), undefined);
      return;
    }
    try {
      done(null, JSON.parse(bytes.toString('utf8')));
    } catch (err) {
      done(new GatewayError('invalid_json', `The request body is not valid JSON: ${(err as Error).message}`), undefined);
    }
  });
}

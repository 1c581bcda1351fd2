/**
 * The AWS event-stream encoding of a ConverseStream reply (binary messages: prelude with lengths
 * and a CRC32, typed headers, payload, message CRC32), decoded and encoded with the Smithy
 * codec the AWS SDKs use (`@smithy/core/event-streams`: `EventStreamCodec` checks both CRCs,
 * `getChunkedStream` cuts a byte stream into whole messages). Nothing of the framing is written here.
 *
 * A message becomes an {@link SseEvent} so the gateway's stream path treats every provider alike:
 * `:message-type: event` → `event` = its `:event-type`, `data` = its JSON payload;
 * `:message-type: exception` → `event: 'error'`, `data` = `{"exception": <:exception-type>, "message": …}`;
 * `:message-type: error` (a protocol error) → `event: 'error'`, `data` = `{"exception": <:error-code>, "message": <:error-message>}`.
 */
import { EventStreamCodec, getChunkedStream } from '@smithy/core/event-streams';
import type { Message, MessageHeaders } from '@smithy/core/event-streams';
import { fromUtf8, toUtf8 } from '@smithy/core/serde';
import type { SseEvent } from '../sse.ts';

const codec = new EventStreamCodec(toUtf8, fromUtf8);

function stringHeader(headers: MessageHeaders, name: string): string | undefined {
  const h = headers[name];
  return h !== undefined && h.type === 'string' ? h.value : undefined;
}

/** One decoded event-stream message as an event (see the module comment). */
export function eventOfMessage(message: Message): SseEvent {
  const headers = message.headers;
  const text = toUtf8(message.body);
  const kind = stringHeader(headers, ':message-type');
  if (kind === 'exception' || kind === 'error') {
    let detail = stringHeader(headers, ':error-message');
    if (kind === 'exception') {
      try {
        const body = JSON.parse(text) as { message?: unknown; Message?: unknown };
        const m = body.message ?? body.Message;
        if (typeof m === 'string') detail = m;
      } catch {
        detail = text;
      }
    }
    const exception = stringHeader(headers, kind === 'exception' ? ':exception-type' : ':error-code') ?? 'internalServerException';
    return { raw: '', event: 'error', data: JSON.stringify({ exception, message: detail ?? '' }) };
  }
  return { raw: '', event: stringHeader(headers, ':event-type') ?? '', data: text };
}

/**
 * The events of an event-stream body, one batch per message.
 * @throws Error (from the codec) on a truncated message or a CRC mismatch.
 */
export async function* bedrockEvents(body: AsyncIterable<Uint8Array>): AsyncGenerator<readonly SseEvent[]> {
  for await (const frame of getChunkedStream(body)) yield [eventOfMessage(codec.decode(frame))];
}

function headersOf(entries: Record<string, string>): MessageHeaders {
  const headers: MessageHeaders = {};
  for (const [name, value] of Object.entries(entries)) headers[name] = { type: 'string', value };
  return headers;
}

/** One event message (`:message-type: event`) with a JSON payload, encoded. @param type e.g. `contentBlockDelta`. */
export function encodeEvent(type: string, payload: unknown): Uint8Array {
  return codec.encode({ headers: headersOf({ ':event-type': type, ':content-type': 'application/json', ':message-type': 'event' }), body: fromUtf8(JSON.stringify(payload)) });
}

/** One exception message (`:message-type: exception`) with `{"message": …}`, encoded. @param type e.g. `throttlingException`. */
export function encodeException(type: string, message: string): Uint8Array {
  return codec.encode({ headers: headersOf({ ':exception-type': type, ':content-type': 'application/json', ':message-type': 'exception' }), body: fromUtf8(JSON.stringify({ message })) });
}

/** Decodes one whole message (tests, and the simulator's self-check). @throws Error on a bad length or CRC. */
export function decodeMessage(frame: Uint8Array): SseEvent {
  return eventOfMessage(codec.decode(frame));
}

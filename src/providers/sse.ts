/**
 * Splits a Server-Sent Events byte stream into whole events without re-encoding them, so a proxy
 * can inspect each event and forward its exact bytes. Events end with a blank line (`\n\n`, or
 * `\r\n\r\n`, per the WHATWG SSE spec). A parser library would hand back decoded fields, not the
 * original bytes, which is why this small splitter exists.
 */

/** One complete event: its raw text (terminator included) and the joined `data:` lines. */
export interface SseEvent {
  /** Exact text of the event, blank-line terminator included; forward this. */
  readonly raw: string;
  /** Value of the `event:` field, or '' when absent. */
  readonly event: string;
  /** `data:` lines joined with `\n`. */
  readonly data: string;
}

/** Incremental splitter: feed chunks, get whole events; keeps the incomplete tail. */
export class SseSplitter {
  #buffer = '';
  readonly #decoder = new TextDecoder('utf-8');

  /** Adds a chunk of the stream; returns the events it completed (possibly none). */
  push(chunk: Uint8Array): SseEvent[] {
    this.#buffer += this.#decoder.decode(chunk, { stream: true });
    const events: SseEvent[] = [];
    for (;;) {
      const lf = this.#buffer.indexOf('\n\n');
      const crlf = this.#buffer.indexOf('\r\n\r\n');
      let end: number;
      if (lf === -1 && crlf === -1) break;
      if (crlf !== -1 && (lf === -1 || crlf < lf)) end = crlf + 4;
      else end = lf + 2;
      const raw = this.#buffer.slice(0, end);
      this.#buffer = this.#buffer.slice(end);
      events.push(parseEvent(raw));
    }
    return events;
  }

  /** The unterminated tail left at the end of the stream ('' when the stream ended cleanly). */
  rest(): string {
    return this.#buffer + this.#decoder.decode();
  }
}

function parseEvent(raw: string): SseEvent {
  let event = '';
  let data: string | undefined;
  for (const line of raw.split(/\r?\n/)) {
    if (line.startsWith('data:')) {
      const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
      data = data === undefined ? value : `${data}\n${value}`;
    } else if (line.startsWith('event:')) {
      event = line.charCodeAt(6) === 32 ? line.slice(7) : line.slice(6);
    }
  }
  return { raw, event, data: data ?? '' };
}

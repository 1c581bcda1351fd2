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

/** The fields of one event's text: lines end at `\n` (a `\r` before it is dropped), as `split(/\r?\n/)` would cut them, without the regex. */
function parseEvent(raw: string): SseEvent {
  let event = '';
  let data: string | undefined;
  for (let start = 0; start < raw.length; ) {
    let end = raw.indexOf('\n', start);
    if (end === -1) end = raw.length;
    const lineEnd = end > start && raw.charCodeAt(end - 1) === 13 ? end - 1 : end;
    if (raw.startsWith('data:', start)) {
      const value = raw.slice(Math.min(lineEnd, start + (raw.charCodeAt(start + 5) === 32 ? 6 : 5)), lineEnd);
      data = data === undefined ? value : `${data}\n${value}`;
    } else if (raw.startsWith('event:', start)) {
      event = raw.slice(Math.min(lineEnd, start + (raw.charCodeAt(start + 6) === 32 ? 7 : 6)), lineEnd);
    }
    start = end + 1;
  }
  return { raw, event, data: data ?? '' };
}

/**
 * Whether the bytes relayed so far are a complete answer, so that a client closing its connection
 * right after the last event (the Python SDKs close a stream at `data: [DONE]`, before the node's
 * terminating chunk reaches the router) is counted with the node's status, not as a 499:
 * - an answer with a `content-length`: every byte of it was written;
 * - an SSE stream (`text/event-stream`): the last event written is a terminal one and nothing
 *   followed it — `data: [DONE]` (OpenAI chat and completions, Azure, Gemini, vLLM),
 *   `event: message_stop` (Anthropic), `event: response.completed` / `response.incomplete` /
 *   `response.failed` (OpenAI Responses).
 * Events are told apart by a blank line (`\n\n`); a stream framed with `\r\n\r\n` is never judged
 * complete (a client leaving it before the node's end stays a 499).
 */

/** The start of an event that ends a stream (checked on the event's first bytes). */
const TERMINAL = /^(?:data: ?\[DONE\]|event: ?(?:message_stop|response\.(?:completed|incomplete|failed))\s)/;
/** Bytes kept of an event's start: enough for the longest {@link TERMINAL} prefix. */
const HEAD_BYTES = 40;
const NEWLINE = 0x0a;

/** Follows one relayed answer's body; see the module comment. */
export class AnswerEnd {
  readonly #length: number | undefined;
  readonly #sse: boolean;
  #written = 0;
  /** The first bytes of the event being received (latin1). */
  #head = '';
  /** The head of the last complete event, while nothing has followed it. */
  #lastEvent: string | undefined;
  #endedWithNewline = false;

  /**
   * @param contentType the answer's `content-type`, if any.
   * @param contentLength the answer's `content-length`, if any (bytes).
   */
  constructor(contentType: string | undefined, contentLength: string | undefined) {
    const length = contentLength === undefined ? Number.NaN : Number(contentLength);
    this.#length = Number.isSafeInteger(length) && length >= 0 ? length : undefined;
    this.#sse = this.#length === undefined && contentType !== undefined && contentType.toLowerCase().startsWith('text/event-stream');
  }

  /** Whether an answer of this type can be judged at all (else {@link complete} stays false until the node ends it). */
  get judged(): boolean {
    return this.#length !== undefined || this.#sse;
  }

  /** A body chunk was written to the client. */
  push(chunk: Buffer): void {
    this.#written += chunk.length;
    if (!this.#sse) return;
    let from = 0;
    // A blank line split across chunks: the previous ended with `\n`, this starts with one.
    if (this.#endedWithNewline && chunk[0] === NEWLINE) {
      this.#eventEnded();
      from = 1;
    }
    for (;;) {
      const blank = chunk.indexOf('\n\n', from, 'latin1');
      if (blank === -1) break;
      this.#add(chunk, from, blank);
      this.#eventEnded();
      from = blank + 2;
    }
    this.#add(chunk, from, chunk.length);
    this.#endedWithNewline = chunk.length > 0 && chunk[chunk.length - 1] === NEWLINE;
  }

  /** Whether everything of the answer was written (see the module comment). */
  get complete(): boolean {
    if (this.#length !== undefined) return this.#written >= this.#length;
    return this.#sse && this.#lastEvent !== undefined && TERMINAL.test(this.#lastEvent);
  }

  #add(chunk: Buffer, from: number, to: number): void {
    // Blank lines between events (more than one) start no event.
    if (this.#head.length === 0) while (from < to && chunk[from] === NEWLINE) from++;
    if (to <= from) return;
    this.#lastEvent = undefined;
    if (this.#head.length < HEAD_BYTES) this.#head += chunk.toString('latin1', from, Math.min(to, from + HEAD_BYTES - this.#head.length));
  }

  #eventEnded(): void {
    // An empty "event" (extra blank lines) leaves the last one as it was.
    if (this.#head.length === 0) return;
    this.#lastEvent = this.#head;
    this.#head = '';
  }
}

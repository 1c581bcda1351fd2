/**
 * src/router/stream-end.ts: when the bytes a router relayed are a complete answer (a client closing
 * then is not a 499): a `content-length` body all written; an SSE stream whose last event is a
 * terminal one with nothing after it, however the bytes were split into chunks.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AnswerEnd } from '../../src/router/stream-end.ts';

/** An SSE follower fed `text` in chunks of `size` bytes. */
function fed(text: string, size = text.length): AnswerEnd {
  const end = new AnswerEnd('text/event-stream; charset=utf-8', undefined);
  const bytes = Buffer.from(text, 'latin1');
  for (let i = 0; i < bytes.length; i += size) end.push(bytes.subarray(i, i + size));
  return end;
}

describe('AnswerEnd', () => {
  test('SSE: complete after a terminal event, whatever the chunking; not after any other event, nor mid-event', () => {
    const streams = [
      'data: {"x":1}\n\ndata: [DONE]\n\n',
      'data:[DONE]\n\n',
      'event: message_start\ndata: {}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n',
      `event: response.completed\ndata: {"response":"${'y'.repeat(5_000)}"}\n\n`,
      'event: response.incomplete\ndata: {}\n\n',
      'event: response.failed\ndata: {}\n\n',
      'data: [DONE]\n\n\n',
    ];
    for (const s of streams) for (const size of [1, 2, 3, 7, 64, s.length]) assert.equal(fed(s, size).complete, true, `${JSON.stringify(s.slice(0, 40))} in chunks of ${size}`);
    const unfinished = [
      'data: {"x":1}\n\n',
      'data: [DONE]\n',
      'data: [DONE]\n\ndata: {"late":1}\n\n',
      'data: [DONE]\n\ndata: {"la',
      'event: message_stop\ndata: {"type":"message_stop"}',
      'event: message_stopped\ndata: {}\n\n',
      'event: response.created\ndata: {}\n\n',
      // CRLF framing is not recognized (conservative: stays a 499).
      'data: [DONE]\r\n\r\n',
      '',
    ];
    for (const s of unfinished) for (const size of [1, 5, Math.max(1, s.length)]) assert.equal(fed(s, size).complete, false, `${JSON.stringify(s)} in chunks of ${size}`);
  });

  test('content-length: complete once every byte was written; judged for any content type', () => {
    const end = new AnswerEnd('application/json', '10');
    assert.equal(end.judged, true);
    end.push(Buffer.from('{"a":'));
    assert.equal(end.complete, false);
    end.push(Buffer.from('"xy"}'));
    assert.equal(end.complete, true);
    assert.equal(new AnswerEnd('text/event-stream', '0').complete, true);
  });

  test('a chunked answer that is not SSE is never judged (a client leaving it before the end is a 499)', () => {
    const end = new AnswerEnd('application/json', undefined);
    assert.equal(end.judged, false);
    end.push(Buffer.from('data: [DONE]\n\n'));
    assert.equal(end.complete, false);
    assert.equal(new AnswerEnd(undefined, 'nope').judged, false);
  });
});

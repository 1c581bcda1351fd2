/**
 * SseSplitter's event parsing against the reference reading of the WHATWG line rules it replaced
 * (`split(/\r?\n/)` per event): same `raw`, `event` and `data` for any mix of fields, CRLF and LF.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { SseSplitter } from '../../src/providers/sse.ts';

function reference(raw: string): { raw: string; event: string; data: string } {
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

const FIELDS = ['data:', 'data: ', 'data:  x', 'event:', 'event: ', 'event:error', ': comment', 'id: 7', 'retry: 10', 'dat', 'data', '{"a":"b\\"c"}', ' ', '\r', 'é', '[DONE]'];
const line = fc.array(fc.constantFrom(...FIELDS), { minLength: 0, maxLength: 4 }).map((parts) => parts.join('').replace(/\r$/, ''));
const eventText = fc.tuple(fc.array(line, { minLength: 1, maxLength: 5 }), fc.constantFrom('\n', '\r\n')).map(([lines, eol]) => lines.map((l) => l.replaceAll('\n', '')).join(eol) + eol + eol);

test('events parse as the split(/\\r?\\n/) reading does, whatever the chunking', () => {
  fc.assert(
    fc.property(fc.array(eventText, { minLength: 1, maxLength: 6 }), fc.integer({ min: 1, max: 40 }), (events, chunkSize) => {
      const bytes = Buffer.from(events.join(''), 'utf8');
      const splitter = new SseSplitter();
      const got = [];
      for (let i = 0; i < bytes.length; i += chunkSize) got.push(...splitter.push(bytes.subarray(i, i + chunkSize)));
      const expected = new SseSplitter();
      const raws = expected.push(bytes).map((e) => e.raw);
      assert.deepEqual(got.map((e) => ({ ...e })), raws.map(reference));
      assert.equal(splitter.rest(), expected.rest());
    }),
    { numRuns: 500 },
  );
});

test('data and event fields, LF and CRLF', () => {
  const [a, b] = new SseSplitter().push(Buffer.from('event: error\ndata: {"x":1}\ndata:two\n\nid: 1\r\ndata:  spaced\r\n\r\n'));
  assert.deepEqual({ ...a }, { raw: 'event: error\ndata: {"x":1}\ndata:two\n\n', event: 'error', data: '{"x":1}\ntwo' });
  assert.deepEqual({ ...b }, { raw: 'id: 1\r\ndata:  spaced\r\n\r\n', event: '', data: ' spaced' });
});

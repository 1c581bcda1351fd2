import assert from 'node:assert/strict';
import { test } from 'node:test';
import { endToEndHeaderList, endToEndRawHeaders } from '../../src/router/hop-by-hop.ts';
import { rawHeader } from '../../src/router/relay.ts';

const raw = (...pairs: string[]): Buffer[] => pairs.map((s) => Buffer.from(s, 'latin1'));

test('endToEndRawHeaders: names lower case, values as sent, repeats kept in order; hop-by-hop and Connection-named headers dropped', () => {
  const headers = raw('Content-Type', 'application/json', 'Set-Cookie', 'a=1', 'Transfer-Encoding', 'chunked', 'Set-Cookie', 'b=2', 'X-Secret', 's', 'Connection', 'X-Secret, keep-alive', 'Keep-Alive', 'timeout=5', 'X-Caf\xe9', 'cr\xe8me');
  assert.deepEqual(endToEndRawHeaders(headers), ['content-type', 'application/json', 'set-cookie', 'a=1', 'set-cookie', 'b=2', 'x-caf\xe9', 'cr\xe8me']);
  assert.deepEqual(endToEndRawHeaders(raw('connection', 'close', 'x-a', '1')), ['x-a', '1']);
});

test('endToEndHeaderList: a flat list without hop-by-hop, dropped or Connection-named headers; array values repeat the name', () => {
  const list = endToEndHeaderList({ host: 'h', 'content-type': 'application/json', connection: 'x-hop', 'x-hop': '1', te: 'trailers', 'set-cookie': ['a', 'b'], 'x-quotaring-tenant': 'evil' }, new Set(['host', 'x-quotaring-tenant']));
  assert.deepEqual(list, ['content-type', 'application/json', 'set-cookie', 'a', 'set-cookie', 'b']);
});

test('rawHeader: the first value of a header, names compared case-insensitively', () => {
  assert.equal(rawHeader(raw('X-Quotaring-Owner', 'n2', 'x-quotaring-owner', 'n3'), 'x-quotaring-owner'), 'n2');
  assert.equal(rawHeader(raw('x-other', '1'), 'x-quotaring-owner'), undefined);
});

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { noRouteMessage } from '../../src/errors.ts';

test('a 404 message names the method and the path without its query, cut to 120 characters', () => {
  assert.equal(noRouteMessage('GET', '/v1/nope?key=secret'), 'No route for GET /v1/nope.');
  const long = `/v1/${'a'.repeat(15_000)}`;
  assert.equal(noRouteMessage('POST', long), `No route for POST ${long.slice(0, 120)}….`);
});

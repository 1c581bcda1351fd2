/** `--members` parsing: what each bad list gets. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseMemberList } from '../../src/coord/membership/member-list.ts';

describe('parseMemberList', () => {
  test('id=url pairs in order, with an optional *weight', () => {
    assert.deepEqual(parseMemberList('node-1=http://127.0.0.1:8101, node-2=http://127.0.0.1:8102*2'), [
      { id: 'node-1', url: 'http://127.0.0.1:8101' },
      { id: 'node-2', url: 'http://127.0.0.1:8102', weight: 2 },
    ]);
  });
  test('bad entries are refused with the entry named', () => {
    assert.throws(() => parseMemberList(''), /no member given/);
    assert.throws(() => parseMemberList('node-1'), /"node-1" is not id=url/);
    assert.throws(() => parseMemberList('=http://h:1'), /is not id=url/);
    assert.throws(() => parseMemberList('node 1=http://h:1'), /member id: 1-64 of/);
    assert.throws(() => parseMemberList('node-1=ftp://h:1'), /"node-1=ftp:\/\/h:1"/);
    assert.throws(() => parseMemberList('node-1=http://h:1*0'), /"node-1=http:\/\/h:1\*0"/);
    assert.throws(() => parseMemberList('a=http://h:1,a=http://h:2'), /"a" appears twice/);
  });
});

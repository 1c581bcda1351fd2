import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { jainIndex } from '../../bench/fairshare/jain.ts';

describe('jainIndex', () => {
  test('1 when every tenant got the same fraction of its share, whatever the fraction', () => {
    assert.equal(jainIndex([1, 1, 1, 1]), 1);
    assert.equal(jainIndex([0.5, 0.5, 0.5]), 1);
  });

  test('1/n when one tenant got everything', () => {
    assert.equal(jainIndex([4, 0, 0, 0]), 0.25);
    assert.equal(jainIndex([0, 0, 7]), 1 / 3);
  });

  test('(Σx)² / (n Σx²) in between', () => {
    // (1 + 0.5)² / (2 × (1 + 0.25)) = 2.25 / 2.5
    assert.equal(jainIndex([1, 0.5]), 0.9);
    assert.ok(Math.abs(jainIndex([2.2, 0.2, 0.2, 1]) - 12.96 / (4 * 5.92)) < 1e-12);
    assert.ok(Math.abs(jainIndex([22, 2, 2, 10]) - jainIndex([2.2, 0.2, 0.2, 1])) < 1e-12);
  });

  test('no tenants, or nothing owed nor got: 1', () => {
    assert.equal(jainIndex([]), 1);
    assert.equal(jainIndex([0, 0]), 1);
  });

  test('a negative or non-finite allocation is refused', () => {
    assert.throws(() => jainIndex([1, -0.1]), RangeError);
    assert.throws(() => jainIndex([Number.NaN]), RangeError);
    assert.throws(() => jainIndex([Infinity, 1]), RangeError);
  });
});

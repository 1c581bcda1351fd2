/**
 * The README and docs/ hold together (issue 19): every relative link points at a file that exists
 * and every `#anchor` at a heading of its target (GitHub's slugs); no Markdown link sits inside a
 * code block (it would print as text); and what the docs say about request ids is what the code
 * makes.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { requestIdGenerator } from '../../src/gateway/context.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const FILES = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

/** A Markdown file split into prose (outside fenced code blocks) and code lines, with line numbers. */
function split(text: string): { prose: [number, string][]; code: [number, string][] } {
  const prose: [number, string][] = [];
  const code: [number, string][] = [];
  let fenced = false;
  text.split('\n').forEach((line, i) => {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      return;
    }
    (fenced ? code : prose).push([i + 1, line]);
  });
  return { prose, code };
}

/** GitHub's anchor of a heading (github-slugger): lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Anchors of a Markdown file's headings, numbered as GitHub numbers repeats (`-1`, `-2`). */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, line] of split(readFileSync(file, 'utf8')).prose) {
    const m = /^#{1,6}\s+(.*)$/.exec(line);
    if (m === null) continue;
    const base = slug(m[1] as string);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

const LINK = /\[[^\]]*\]\(([^)\s]+)\)/g;

describe('README and docs/: links', () => {
  test('every relative link names a file that exists, and every anchor a heading of it', () => {
    const broken: string[] = [];
    for (const file of FILES) {
      const path = join(ROOT, file);
      for (const [n, line] of split(readFileSync(path, 'utf8')).prose) {
        for (const m of line.matchAll(LINK)) {
          const target = m[1] as string;
          if (/^[a-z]+:/i.test(target)) continue; // http(s), mailto
          const [file2 = '', anchor] = target.split('#');
          const dest = file2 === '' ? path : resolve(dirname(path), file2);
          if (!existsSync(dest)) {
            broken.push(`${file}:${n}: ${target} (no ${relative(ROOT, dest)})`);
            continue;
          }
          if (anchor !== undefined && dest.endsWith('.md') && !anchors(dest).has(anchor)) broken.push(`${file}:${n}: ${target} (no heading #${anchor} in ${relative(ROOT, dest)})`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });

  test('no Markdown link inside a code block', () => {
    const inCode: string[] = [];
    for (const file of FILES) {
      for (const [n, line] of split(readFileSync(join(ROOT, file), 'utf8')).code) if (LINK.test(line)) inCode.push(`${file}:${n}: ${line.trim()}`);
    }
    assert.deepEqual(inCode, []);
  });

  test('slugs as GitHub makes them', () => {
    assert.equal(slug('Cluster (`npm run bench:cluster`, about 3 minutes)'), 'cluster-npm-run-benchcluster-about-3-minutes');
    assert.equal(slug('Deployment quotas (the global cap)'), 'deployment-quotas-the-global-cap');
    assert.equal(slug('Central-store mode (`mode: central`)'), 'central-store-mode-mode-central');
  });
});

describe('request ids: the docs say what the code makes', () => {
  test('`<8 hex>-<22 base64url>`, the prefix random per node process (it does not name the node)', () => {
    const next = requestIdGenerator();
    const [a, b] = [next(), next()];
    assert.match(a, /^[0-9a-f]{8}-[A-Za-z0-9_-]{22}$/);
    assert.equal(a.slice(0, 8), b.slice(0, 8));
    assert.notEqual(requestIdGenerator()().slice(0, 8), a.slice(0, 8));
    const docs = FILES.map((f) => readFileSync(join(ROOT, f), 'utf8')).join('\n');
    assert.match(docs, /`x-quotaring-request-id` \(`<8 hex characters>-<22 base64url characters>`: the prefix is chosen at random when the node process starts/);
    assert.doesNotMatch(docs, /8 hex characters name the node/);
  });
});

/**
 * Summarises a V8 CPU profile (`node --cpu-prof`): the functions with the most self time, and the
 * share of total samples. Usage: node --import tsx bench/lib/profile-top.ts <file.cpuprofile> [top = 30] [under]
 * With `under` (a part of a script URL, e.g. `src/fairshare/`): also the busy samples with a frame of
 * such a script anywhere on their stack, each counted once (what that code costs with its callees).
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly hitCount?: number;
  readonly children?: readonly number[];
}

const file = process.argv[2];
if (file === undefined) throw new Error('usage: profile-top.ts <file.cpuprofile> [top]');
const top = Number(process.argv[3] ?? 30);
const under = process.argv[4];
const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[] };
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const nameOf = (n: ProfileNode): string => {
  const f = n.callFrame;
  const where = f.url === '' ? '' : ` ${f.url.replace(/^.*\/(node_modules|src|dist)\//, '$1/')}:${f.lineNumber + 1}`;
  return `${f.functionName || '(anonymous)'}${where}`;
};
const hits = new Map<number, number>();
for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
const self = new Map<string, number>();
for (const [id, count] of hits) {
  const n = byId.get(id);
  if (n !== undefined) self.set(nameOf(n), (self.get(nameOf(n)) ?? 0) + count);
}
// Inclusive time: samples under each node, counted once per function on a path (recursion).
const inclusive = new Map<string, number>();
const walk = (id: number, onPath: ReadonlySet<string>): number => {
  const n = byId.get(id);
  if (n === undefined) return 0;
  const name = nameOf(n);
  let total = hits.get(id) ?? 0;
  const path = onPath.has(name) ? onPath : new Set([...onPath, name]);
  for (const child of n.children ?? []) total += walk(child, path);
  if (!onPath.has(name)) inclusive.set(name, (inclusive.get(name) ?? 0) + total);
  return total;
};
const childIds = new Set(profile.nodes.flatMap((n) => n.children ?? []));
for (const n of profile.nodes) if (!childIds.has(n.id)) walk(n.id, new Set());
const total = profile.samples.length;
const idle = self.get('(idle)') ?? 0;
process.stdout.write(`${total} samples, ${((idle / total) * 100).toFixed(1)}% idle; self time as % of busy samples:\n`);
for (const [name, count] of [...self].filter(([n]) => n !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, top)) {
  process.stdout.write(`${((count / (total - idle)) * 100).toFixed(1).padStart(5)}%  ${name}\n`);
}
process.stdout.write('inclusive (total) time as % of busy samples:\n');
for (const [name, count] of [...inclusive].filter(([n]) => n !== '(idle)' && n !== '(root)').sort((a, b) => b[1] - a[1]).slice(0, top)) {
  process.stdout.write(`${((count / (total - idle)) * 100).toFixed(1).padStart(5)}%  ${name}\n`);
}
if (under !== undefined) {
  let within = 0;
  const mark = (id: number, inside: boolean): void => {
    const n = byId.get(id);
    if (n === undefined) return;
    const here = inside || n.callFrame.url.includes(under);
    if (here) within += hits.get(id) ?? 0;
    for (const child of n.children ?? []) mark(child, here);
  };
  for (const n of profile.nodes) if (!childIds.has(n.id)) mark(n.id, false);
  process.stdout.write(`busy samples with ${under} on the stack: ${((within / (total - idle)) * 100).toFixed(2)}%\n`);
}

/**
 * Summarises a V8 CPU profile (`node --cpu-prof`): the functions with the most self time, and the
 * share of total samples. Usage: node --import tsx bench/profile-top.ts <file.cpuprofile> [top = 30]
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly hitCount?: number;
}

const file = process.argv[2];
if (file === undefined) throw new Error('usage: profile-top.ts <file.cpuprofile> [top]');
const top = Number(process.argv[3] ?? 30);
const profile = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[] };
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<string, number>();
for (const id of profile.samples) {
  const n = byId.get(id);
  if (n === undefined) continue;
  const f = n.callFrame;
  const where = f.url === '' ? '' : ` ${f.url.replace(/^.*\/(node_modules|src|dist)\//, '$1/')}:${f.lineNumber + 1}`;
  const name = `${f.functionName || '(anonymous)'}${where}`;
  self.set(name, (self.get(name) ?? 0) + 1);
}
const total = profile.samples.length;
const idle = self.get('(idle)') ?? 0;
process.stdout.write(`${total} samples, ${((idle / total) * 100).toFixed(1)}% idle; self time as % of busy samples:\n`);
for (const [name, count] of [...self].filter(([n]) => n !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, top)) {
  process.stdout.write(`${((count / (total - idle)) * 100).toFixed(1).padStart(5)}%  ${name}\n`);
}

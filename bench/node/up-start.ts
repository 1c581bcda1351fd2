/**
 * Time from `quotaring up` (what `npm start` runs) to its banner: the built CLI is started `--runs`
 * times on free ports, the clock stops when the banner's headline is printed, then Ctrl-C (SIGINT)
 * stops it and the next run waits for its exit.
 *
 * Run: `npm run build && node --import tsx bench/node/up-start.ts [--runs 5] [--nodes 3]`
 * Prints each run's ms and the median.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import { BANNER_HEADLINE } from '../../cluster/banner.ts';
import { CLI, freePortRun } from '../../test/helpers/processes.ts';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' }, nodes: { type: 'string', default: '3' } } });
const RUNS = Number(values.runs);
const NODES = Number(values.nodes);

const times: number[] = [];
for (let run = 0; run < RUNS; run++) {
  const base = await freePortRun(NODES + 8);
  const args = ['up', '--nodes', String(NODES), '--port', String(base), '--node-port', String(base + 1), '--simulator-port', String(base + NODES + 1), '--admin-port', String(base + NODES + 2)];
  const started = performance.now();
  const proc = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const banner = new Promise<number>((resolve, reject) => {
    proc.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes(BANNER_HEADLINE)) resolve(performance.now() - started);
    });
    proc.once('exit', (code) => reject(new Error(`up exited (${code}) before its banner:\n${out}`)));
  });
  proc.stderr.resume();
  const ms = await banner;
  times.push(ms);
  process.stdout.write(`run ${run + 1}: ${Math.round(ms)} ms to the banner\n`);
  proc.kill('SIGINT');
  await once(proc, 'exit');
}
const sorted = [...times].sort((a, b) => a - b);
process.stdout.write(`median ${Math.round(sorted[Math.floor(sorted.length / 2)] ?? 0)} ms over ${RUNS} runs (${NODES} nodes)\n`);

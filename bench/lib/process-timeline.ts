/**
 * What a benchmark learns about a child process besides its answers: its output written whole to a
 * file (pino JSON lines), those lines read back as a timeline relative to an instant, and how its
 * main thread spent the wall time (`/proc/<pid>/schedstat`: ns on a CPU, ns runnable but waiting
 * for one), and the machine's CPU use (`/proc/stat`). Linux only; elsewhere the figures are NaN.
 */
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import type { Child } from './cluster-processes.ts';

/**
 * Appends everything `child` prints (stdout and stderr) to `file`.
 * @returns a promise that resolves once the file is closed (after the child's streams ended).
 */
export function captureOutput(child: Child, file: string): Promise<void> {
  const out = createWriteStream(file, { flags: 'a' });
  let open = 2;
  const done = new Promise<void>((resolve) => out.once('close', () => resolve()));
  const ended = (): void => {
    if (--open === 0) out.end();
  };
  for (const s of [child.proc.stdout, child.proc.stderr]) {
    if (s === null) {
      ended();
      continue;
    }
    s.on('data', (d: Buffer) => out.write(d));
    s.once('close', ended);
  }
  return done;
}

/** One JSON log line. */
export interface LogLine {
  /** Epoch ms (pino's `time`). */
  readonly time: number;
  /** pino level number (30 info, 40 warn, 50 error). */
  readonly level: number;
  readonly msg: string;
  /** The line's other fields (pid, hostname and the request id left out). */
  readonly fields: Record<string, unknown>;
}

/** The JSON lines of a captured log file (lines that are not pino JSON are skipped). */
export function readLogLines(file: string): LogLine[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  const lines: LogLine[] = [];
  for (const raw of text.split('\n')) {
    if (!raw.startsWith('{')) continue;
    try {
      const o = JSON.parse(raw) as Record<string, unknown>;
      if (typeof o['time'] !== 'number' || typeof o['msg'] !== 'string') continue;
      const { time, level, msg, pid: _pid, hostname: _host, reqId: _req, ...fields } = o;
      lines.push({ time: time as number, level: typeof level === 'number' ? level : 0, msg: msg as string, fields });
    } catch {
      // not a log line
    }
  }
  return lines;
}

const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/**
 * Lines of several processes in `[fromMs, toMs]` (epoch ms) as `+<ms after zeroMs> <process> <level>
 * <msg> <fields>`, time-ordered; lines whose msg is in `skip` are left out, and consecutive lines of
 * one process with the same msg (other processes' lines between them aside) are shown as the first
 * and `(×n, last at +ms)`.
 */
export function timeline(
  sources: readonly { readonly name: string; readonly lines: readonly LogLine[] }[],
  zeroMs: number,
  fromMs: number,
  toMs: number,
  skip: ReadonlySet<string>,
): string[] {
  const all = sources.flatMap((s) => s.lines.filter((l) => l.time >= fromMs && l.time <= toMs && !skip.has(l.msg)).map((l) => ({ name: s.name, l })));
  all.sort((a, b) => a.l.time - b.l.time);
  const out: { name: string; l: LogLine; n: number; last: number }[] = [];
  const lastOf = new Map<string, { name: string; l: LogLine; n: number; last: number }>();
  for (const e of all) {
    const prev = lastOf.get(e.name);
    if (prev !== undefined && prev.l.msg === e.l.msg) {
      prev.n++;
      prev.last = e.l.time;
      continue;
    }
    const entry = { name: e.name, l: e.l, n: 1, last: e.l.time };
    out.push(entry);
    lastOf.set(e.name, entry);
  }
  const rel = (t: number): string => `${t - zeroMs >= 0 ? '+' : ''}${Math.round(t - zeroMs)}`;
  return out.map((o) => {
    const fields = JSON.stringify(o.l.fields);
    const more = o.n > 1 ? ` (×${o.n}, last at ${rel(o.last)} ms)` : '';
    return `${rel(o.l.time).padStart(7)} ms ${o.name} ${LEVELS[o.l.level] ?? o.l.level} ${o.l.msg} ${fields.length > 220 ? `${fields.slice(0, 217)}...` : fields}${more}`;
  });
}

/** How a thread spent its life so far: ms running on a CPU, and ms runnable but waiting for one. */
export interface SchedTimes {
  readonly runMs: number;
  readonly waitMs: number;
}

/** `/proc/<pid>/schedstat` of a live process's main thread (the event loop of a node process); NaN when unreadable. */
export function mainThreadSched(pid: number | undefined): SchedTimes {
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').trim().split(' ').map(Number);
    return { runMs: (run ?? Number.NaN) / 1e6, waitMs: (wait ?? Number.NaN) / 1e6 };
  } catch {
    return { runMs: Number.NaN, waitMs: Number.NaN };
  }
}

/** The `cpu` line of `/proc/stat`: busy and total jiffies of all cores. */
export interface CpuTicks {
  readonly busy: number;
  readonly total: number;
}

/** Reads the machine's CPU ticks so far (busy = all but idle and iowait); NaN off Linux. */
export function cpuTicks(): CpuTicks {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return { busy: total - idle, total };
  } catch {
    return { busy: Number.NaN, total: Number.NaN };
  }
}

/** Share of the machine's CPU time that was busy between two readings, 0-1. */
export function busyShare(before: CpuTicks, after: CpuTicks): number {
  return (after.busy - before.busy) / Math.max(1, after.total - before.total);
}

/** The 1-minute load average (`/proc/loadavg`); NaN off Linux. */
export function loadAverage1m(): number {
  try {
    return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {
    return Number.NaN;
  }
}

/** CPU ms (user + system) per live process, by pid, with its parent: `/proc/<pid>/stat` of every process (Linux; empty elsewhere). */
function processTable(): Map<number, { readonly ppid: number; readonly cpuMs: number }> {
  const table = new Map<number, { ppid: number; cpuMs: number }>();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return table;
  }
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command name (which may hold spaces): ppid is field 4, utime 14, stime 15.
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(pid), { ppid: Number(f[1]), cpuMs: ((Number(f[11]) + Number(f[12])) * 1_000) / CLOCK_TICKS });
    } catch {
      // exited meanwhile
    }
  }
  return table;
}

/** USER_HZ of Linux /proc times (100 on every mainstream architecture). */
const CLOCK_TICKS = 100;

/** CPU ms used so far by the processes of a tree, split in two. */
export interface TreeCpu {
  /** `root` and its descendants, `apart` and theirs excluded. */
  readonly treeMs: number;
  /** The `apart` processes and their descendants. */
  readonly apartMs: number;
}

/** CPU ms of `root`'s process tree so far, the subtrees of `apart` counted separately. */
export function treeCpu(root: number, apart: readonly number[]): TreeCpu {
  const table = processTable();
  const children = new Map<number, number[]>();
  for (const [pid, p] of table) {
    const list = children.get(p.ppid);
    if (list === undefined) children.set(p.ppid, [pid]);
    else list.push(pid);
  }
  const sum = (start: number, skip: ReadonlySet<number>): number => {
    let total = 0;
    const stack = [start];
    while (stack.length > 0) {
      const pid = stack.pop() as number;
      if (skip.has(pid)) continue;
      total += table.get(pid)?.cpuMs ?? 0;
      stack.push(...(children.get(pid) ?? []));
    }
    return total;
  };
  const apartSet = new Set(apart);
  return { treeMs: sum(root, apartSet), apartMs: apart.reduce((a, pid) => a + sum(pid, new Set()), 0) };
}

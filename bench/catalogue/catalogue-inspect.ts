/**
 * The V8 inspector of a benchmark child, opened after its figures were read (`npm run
 * bench:catalogue`): the child is started with `--inspect-port=0` (which opens nothing), SIGUSR1
 * then opens the inspector on a free port, printed on its stderr. Used to force a full garbage
 * collection (what of the RSS is live) and to take a heap snapshot summarised by constructor (what
 * a tenant costs, by kind of object).
 */
import { createWriteStream } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';
import type { Child } from '../lib/cluster-processes.ts';

/** An open inspector session. */
export class Inspector {
  readonly #ws: WebSocket;
  #next = 1;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  readonly #events = new Map<string, (params: unknown) => void>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on('message', (data: WebSocket.RawData) => {
      const msg = JSON.parse(data.toString()) as { id?: number; result?: unknown; error?: { message: string }; method?: string; params?: unknown };
      if (msg.id !== undefined) {
        const p = this.#pending.get(msg.id);
        this.#pending.delete(msg.id);
        if (msg.error !== undefined) p?.reject(new Error(msg.error.message));
        else p?.resolve(msg.result);
      } else if (msg.method !== undefined) this.#events.get(msg.method)?.(msg.params);
    });
  }

  /** Opens the inspector of `child` (SIGUSR1, unless open already) and connects. @throws Error when it does not say where within 10 s. */
  static async open(child: Child): Promise<Inspector> {
    const seen = /Debugger listening on (ws:\/\/\S+)/g;
    let url = [...child.output().matchAll(seen)].at(-1)?.[1];
    if (url === undefined) child.proc.kill('SIGUSR1');
    const deadline = performance.now() + 10_000;
    while (url === undefined) {
      url = [...child.output().matchAll(seen)].at(-1)?.[1];
      if (url !== undefined) break;
      if (performance.now() > deadline) throw new Error(`${child.name}: no inspector URL after SIGUSR1`);
      await sleep(20);
    }
    const ws = new WebSocket(url, { maxPayload: 1 << 30 });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new Inspector(ws);
  }

  send<T = unknown>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** A full, compacting collection (HeapProfiler.collectGarbage). */
  async collectGarbage(): Promise<void> {
    await this.send('HeapProfiler.enable');
    await this.send('HeapProfiler.collectGarbage');
  }

  /** Starts the CPU profiler (sampling every `intervalUs`). */
  async startProfile(intervalUs: number): Promise<void> {
    await this.send('Profiler.enable');
    await this.send('Profiler.setSamplingInterval', { interval: intervalUs });
    await this.send('Profiler.start');
  }

  /** Stops the CPU profiler; the profile (`.cpuprofile` JSON). */
  async stopProfile(): Promise<unknown> {
    return (await this.send<{ profile: unknown }>('Profiler.stop')).profile;
  }

  /** Writes a heap snapshot to `file`; resolves once written. */
  async snapshot(file: string): Promise<void> {
    const out = createWriteStream(file);
    this.#events.set('HeapProfiler.addHeapSnapshotChunk', (p) => out.write((p as { chunk: string }).chunk));
    await this.send('HeapProfiler.enable');
    await this.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false, captureNumericValue: false });
    this.#events.delete('HeapProfiler.addHeapSnapshotChunk');
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }

  close(): void {
    this.#ws.close();
  }
}

/** Self size and count of each kind of object in a heap snapshot: `name (type)` → totals. */
export type HeapSummary = Map<string, { count: number; bytes: number }>;

/** Sums a heap snapshot's nodes by constructor (objects, closures) or by type (strings, arrays, code, …). */
export function summarizeSnapshot(text: string): HeapSummary {
  const snap = JSON.parse(text) as { snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } }; nodes: number[]; strings: string[] };
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const width = fields.length;
  const iType = fields.indexOf('type');
  const iName = fields.indexOf('name');
  const iSize = fields.indexOf('self_size');
  const out: HeapSummary = new Map();
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + iType] as number] ?? '?';
    const name = type === 'object' || type === 'closure' || type === 'native' ? `${snap.strings[snap.nodes[i + iName] as number] ?? '?'} (${type})` : `(${type})`;
    const e = out.get(name) ?? { count: 0, bytes: 0 };
    e.count += 1;
    e.bytes += snap.nodes[i + iSize] as number;
    out.set(name, e);
  }
  return out;
}

/** `big − small` per kind, divided by `per` (tenants), largest first: bytes and objects per tenant. */
export function perTenant(big: HeapSummary, small: HeapSummary, per: number, top: number): { kind: string; bytes: number; objects: number }[] {
  const kinds = new Set([...big.keys(), ...small.keys()]);
  return [...kinds]
    .map((kind) => ({ kind, bytes: ((big.get(kind)?.bytes ?? 0) - (small.get(kind)?.bytes ?? 0)) / per, objects: ((big.get(kind)?.count ?? 0) - (small.get(kind)?.count ?? 0)) / per }))
    .sort((a, b) => b.bytes - a.bytes)
    .slice(0, top);
}

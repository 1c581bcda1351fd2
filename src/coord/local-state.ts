/**
 * A node's limiter state on its own disk: saved on a graceful stop (SIGTERM), loaded on start, so a
 * single node (and every node of a cluster stopped all at once, as `npm start` is) keeps every
 * limit across a restart. One file per node, `<server.state_dir>/<node id>.json`:
 * `{v: 1, node, savedAt, states: [{tenant, json, at, expiresAtMs}]}`, where `json` is a
 * `TenantSnapshot` (the handoff's schema), `at` when it was taken and `expiresAtMs` when it is
 * fresh anyway (the tenant's longest window plus a minute).
 *
 * Written atomically: a temp file in the same directory, flushed, then renamed over the old one, so
 * a crash mid-write leaves the previous file whole. Read as untrusted, like a value from Redis: a
 * file over {@link MAX_FILE_BYTES}, one that does not parse, or of another node is corrupt, and
 * every tenant it may have held starts in the conservative state (requests and tokens limits used
 * up for one window, never fresh); each snapshot is parsed and clamped by the loader
 * (`parseTenantSnapshot`, `boundSnapshot` in `src/limiter/snapshot-bounds.ts`). Expired states are
 * skipped. A node that crashes (SIGKILL) writes nothing: its next start loads the file of its
 * previous graceful stop, whose usage is real (only older) and expires by time.
 */
import { mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { WireState } from './replicas.ts';

/** Largest state file read, bytes. */
export const MAX_FILE_BYTES = 512 * 1024 * 1024;

/** A state kept on disk. */
export interface LocalState extends WireState {
  /** Epoch ms after which the state is fresh (not loaded). */
  readonly expiresAtMs: number;
}

/** What {@link loadLocalState} found. */
export type LoadedLocalState =
  | { readonly kind: 'none' }
  | { readonly kind: 'loaded'; readonly states: readonly LocalState[]; readonly expired: number }
  | { readonly kind: 'corrupt'; readonly reason: string };

const FileSchema = z.strictObject({
  v: z.literal(1),
  node: z.string(),
  savedAt: z.number().finite(),
  states: z.array(z.strictObject({ tenant: z.string().min(1), json: z.string(), at: z.number().finite(), expiresAtMs: z.number().finite() })),
});

/** Path of node `node`'s state file in `dir` (relative to the working directory); the id is kept to safe characters. */
export function stateFilePath(dir: string, node: string): string {
  return join(resolve(dir), `${node.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
}

/**
 * Writes `states` as node `node`'s state file in `dir` (created if missing), atomically (temp file,
 * fsync, rename).
 * @param now epoch ms. @default Date.now()
 * @throws the file system's error (the temp file is removed).
 */
export async function saveLocalState(dir: string, node: string, states: readonly LocalState[], now: number = Date.now()): Promise<string> {
  const file = stateFilePath(dir, node);
  await mkdir(resolve(dir), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  const handle = await open(tmp, 'w', 0o600);
  try {
    await handle.writeFile(JSON.stringify({ v: 1, node, savedAt: now, states }));
    await handle.sync();
  } catch (err) {
    await handle.close();
    await unlink(tmp).catch(() => {});
    throw err;
  }
  await handle.close();
  await rename(tmp, file);
  return file;
}

/**
 * Reads node `node`'s state file in `dir`: `none` when there is none, `corrupt` (with the reason,
 * never the content) when it is over {@link MAX_FILE_BYTES}, does not parse, or names another node;
 * otherwise its states not yet expired.
 * @param now epoch ms. @default Date.now()
 * @throws the file system's error other than a missing file.
 */
export async function loadLocalState(dir: string, node: string, now: number = Date.now()): Promise<LoadedLocalState> {
  const file = stateFilePath(dir, node);
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'none' };
    throw err;
  }
  if (size > MAX_FILE_BYTES) return { kind: 'corrupt', reason: `${size} bytes, over the ${MAX_FILE_BYTES}-byte cap` };
  const text = await readFile(file, 'utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { kind: 'corrupt', reason: `not JSON: ${(err as Error).message.slice(0, 120)}` };
  }
  const parsed = FileSchema.safeParse(value);
  if (!parsed.success) return { kind: 'corrupt', reason: `not a state file: ${parsed.error.issues[0]?.message ?? 'invalid'}` };
  if (parsed.data.node !== node) return { kind: 'corrupt', reason: `the file of node ${parsed.data.node.slice(0, 64)}` };
  const states = parsed.data.states.filter((s) => s.expiresAtMs > now);
  return { kind: 'loaded', states, expired: parsed.data.states.length - states.length };
}

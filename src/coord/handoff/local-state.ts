/**
 * A node's limiter state on its own disk: saved on a graceful stop (SIGTERM), loaded on start, so a
 * single node (and every node of a cluster stopped all at once, as `npm start` is) keeps every
 * limit across a restart. One file per node and cluster, `<server.state_dir>/<node id>@<cluster>.json`:
 * `{v: 2, cluster, node, savedAt, states: [{tenant, json, at, expiresAtMs}]}`, where `cluster` is
 * the cluster's identity (`clusterIdentity` in `src/gateway/state-file.ts`: its `cluster.name`, or
 * for an unnamed cluster one derived from its members), `json` is a `TenantSnapshot` (the handoff's
 * schema), `at` when it was taken and `expiresAtMs` when it is fresh anyway (the tenant's longest
 * window plus a minute). Two clusters started from one directory (the default `state_dir` is
 * relative to it) write two files and never load each other's state.
 *
 * Written atomically: a temp file in the same directory, flushed, then renamed over the old one, so
 * a crash mid-write leaves the previous file whole. Read as untrusted, like a value from Redis: a
 * file over {@link MAX_FILE_BYTES}, or one that does not parse, is corrupt, and every tenant it may
 * have held starts in the conservative state (requests and tokens limits used up for one window,
 * never fresh); each snapshot is parsed and clamped by the loader (`parseTenantSnapshot`,
 * `boundSnapshot` in `src/limiter/snapshot-bounds.ts`). Expired states are skipped. A node that
 * crashes (SIGKILL) writes nothing: its next start loads the file of its previous graceful stop,
 * whose usage is real (only older) and expires by time.
 *
 * A well-formed file of another cluster or another node (copied in, or one whose name collides:
 * ids that differ only in characters replaced by `_`, or in case on a case-insensitive file system)
 * is refused: nothing of it is loaded and the node starts fresh, since its usage is real but counts
 * another cluster's requests, not this one's. So is a file of format v1 (`<node id>.json`, from
 * before files carried their cluster): it names no cluster, so any cluster started in that
 * directory with a node of that id could have written it, and it is refused rather than guessed
 * at (left in place, never overwritten: v2 files have other names).
 */
import { mkdir, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { WireState } from './peer-wire.ts';
import { wallNow } from '../../clock.ts';

/** Largest state file read, bytes. */
export const MAX_FILE_BYTES = 512 * 1024 * 1024;

/** A state kept on disk. */
export interface LocalState extends WireState {
  /** Epoch ms after which the state is fresh (not loaded). */
  readonly expiresAtMs: number;
}

/** Whose state file: the cluster's identity and the node's id, both written into the file and its name. */
export interface StateFileOwner {
  /** The cluster's identity (`clusterIdentity` in `src/gateway/state-file.ts`). */
  readonly cluster: string;
  /** The node's id. */
  readonly node: string;
}

/** What {@link loadLocalState} found. */
export type LoadedLocalState =
  | { readonly kind: 'none' }
  | { readonly kind: 'loaded'; readonly states: readonly LocalState[]; readonly expired: number }
  | { readonly kind: 'corrupt'; readonly reason: string }
  /** A well-formed file that is not this node's (another cluster or node, or v1 naming no cluster): nothing loaded. */
  | { readonly kind: 'refused'; readonly file: string; readonly reason: string };

const FileSchema = z.strictObject({
  v: z.literal(2),
  cluster: z.string(),
  node: z.string(),
  savedAt: z.number().finite(),
  states: z.array(z.strictObject({ tenant: z.string().min(1), json: z.string(), at: z.number().finite(), expiresAtMs: z.number().finite() })),
});

/** A v1 file (`<node id>.json`): no cluster in it. */
const V1Schema = z.object({ v: z.literal(1), node: z.string() });

const safe = (id: string): string => id.replace(/[^A-Za-z0-9._-]/g, '_');
/** Quoted for a log line, cut to 128 characters. */
const quoted = (id: string): string => JSON.stringify(id.slice(0, 128));
const named = (o: StateFileOwner): string => `cluster ${quoted(o.cluster)} node ${quoted(o.node)}`;

/**
 * Path of `owner`'s state file in `dir` (relative to the working directory):
 * `<node id>@<cluster>.json`, both kept to safe characters (`@` is in neither, so two owners'
 * names differ unless a replaced character or letter case is all that tells them apart; the file's
 * content tells them apart then).
 */
export function stateFilePath(dir: string, owner: StateFileOwner): string {
  return join(resolve(dir), `${safe(owner.node)}@${safe(owner.cluster)}.json`);
}

/** Path of node `node`'s v1 state file in `dir` (`<node id>.json`, named by the node only), refused when found. */
export function v1StateFilePath(dir: string, node: string): string {
  return join(resolve(dir), `${safe(node)}.json`);
}

/**
 * Writes `states` as `owner`'s state file in `dir` (created if missing), atomically (temp file,
 * fsync, rename). A v1 file of the node is left as it is.
 * @param now epoch ms. @default wallNow() (wall time: the file outlives the process)
 * @returns the file's path.
 * @throws the file system's error (the temp file is removed).
 */
export async function saveLocalState(dir: string, owner: StateFileOwner, states: readonly LocalState[], now: number = wallNow()): Promise<string> {
  const file = stateFilePath(dir, owner);
  await mkdir(resolve(dir), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  const handle = await open(tmp, 'w', 0o600);
  try {
    await handle.writeFile(JSON.stringify({ v: 2, cluster: owner.cluster, node: owner.node, savedAt: now, states }));
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

/** The file's size, or undefined when there is none. @throws the file system's error other than a missing file. */
async function sizeOf(file: string): Promise<number | undefined> {
  try {
    return (await stat(file)).size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * Reads `owner`'s state file in `dir`: `none` when there is none (nor a v1 file of the node);
 * `corrupt` (with the reason, never the content) when it is over {@link MAX_FILE_BYTES} or does not
 * parse; `refused` (with the file and the reason, naming both owners) when it is another cluster's
 * or node's, or when only a v1 file of the node is there (it names no cluster); otherwise its states
 * not yet expired.
 * @param now epoch ms. @default wallNow() (wall time: the file outlives the process)
 * @throws the file system's error other than a missing file.
 */
export async function loadLocalState(dir: string, owner: StateFileOwner, now: number = wallNow()): Promise<LoadedLocalState> {
  const file = stateFilePath(dir, owner);
  const size = await sizeOf(file);
  if (size === undefined) {
    const v1 = v1StateFilePath(dir, owner.node);
    if ((await sizeOf(v1)) === undefined) return { kind: 'none' };
    return { kind: 'refused', file: v1, reason: `it names no cluster (format v1, from before state files carried their cluster), this node is ${named(owner)}` };
  }
  if (size > MAX_FILE_BYTES) return { kind: 'corrupt', reason: `${size} bytes, over the ${MAX_FILE_BYTES}-byte cap` };
  const text = await readFile(file, 'utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { kind: 'corrupt', reason: `not JSON: ${(err as Error).message.slice(0, 120)}` };
  }
  if (V1Schema.safeParse(value).success) return { kind: 'refused', file, reason: `it names no cluster (format v1), this node is ${named(owner)}` };
  const parsed = FileSchema.safeParse(value);
  if (!parsed.success) return { kind: 'corrupt', reason: `not a state file: ${parsed.error.issues[0]?.message ?? 'invalid'}` };
  if (parsed.data.cluster !== owner.cluster || parsed.data.node !== owner.node) {
    return { kind: 'refused', file, reason: `it is the file of ${named(parsed.data)}, this node is ${named(owner)}` };
  }
  const states = parsed.data.states.filter((s) => s.expiresAtMs > now);
  return { kind: 'loaded', states, expired: parsed.data.states.length - states.length };
}

/**
 * Opens the catalogue store a config names (`catalogue.store`) and follows it into the process's
 * catalogue, before the process serves: used by `quotaring node` and `quotaring router`.
 */
import { isAbsolute, join, resolve } from 'node:path';
import type { Config } from '../config/schema.ts';
import type { Catalogue } from './catalogue.ts';
import { CatalogueAdmin } from './admin.ts';
import { FileStore } from './file-store.ts';
import { CatalogueFollower } from './follower.ts';
import type { FollowerLog } from './follower.ts';
import { PostgresStore } from './postgres-store.ts';
import type { CatalogueStore } from './store.ts';

/** What opening a catalogue needs of a loaded config (`LoadedConfig` is one): its sections and the process's catalogue. */
export interface CatalogueSetting {
  readonly config: Pick<Config, 'catalogue' | 'server'>;
  readonly catalogue: Catalogue;
}

/** A process's catalogue machinery: the admin operations and, with a store, the follower. */
export interface OpenCatalogue {
  readonly admin: CatalogueAdmin;
  readonly follower: CatalogueFollower | undefined;
  /** Stops following, writes the local copy, closes the store. */
  close(): Promise<void>;
}

/** The store of `catalogue.store`, or undefined for `none`. @throws Error when its URL variable is unset, or `file` has no path and no `server.state_dir`. */
export function storeFor(config: Pick<CatalogueSetting, 'config'>, env: NodeJS.ProcessEnv = process.env): CatalogueStore | undefined {
  const c = config.config.catalogue;
  if (c.store === 'none') return undefined;
  if (c.store === 'file') {
    const path = c.path ?? (config.config.server.state_dir === '' ? undefined : join(config.config.server.state_dir, 'catalogue.ndjson'));
    if (path === undefined) throw new Error('catalogue.store: file needs catalogue.path (or server.state_dir)');
    return new FileStore({ path: isAbsolute(path) ? path : resolve(path) });
  }
  const url = env[c.url_env];
  if (url === undefined || url === '') throw new Error(`catalogue.store: postgres: the environment variable ${c.url_env} (catalogue.url_env) is not set: give it the database URL`);
  return new PostgresStore({ url, schema: c.schema });
}

/**
 * Opens the store and loads the catalogue (from the local copy first when the store does not
 * answer). `processName` names this process's local copy (`catalogue-copy-<name>.ndjson`).
 * @throws Error when the store cannot be reached and there is no local copy (see `CatalogueFollower.start`).
 */
export async function openCatalogue(config: CatalogueSetting, processName: string, log: FollowerLog, env: NodeJS.ProcessEnv = process.env, onApplied?: (tenants: ReadonlySet<string>) => void): Promise<OpenCatalogue> {
  const store = storeFor(config, env);
  if (store === undefined) return { admin: new CatalogueAdmin({ catalogue: config.catalogue, store: undefined, follower: undefined }), follower: undefined, close: async () => {} };
  const c = config.config.catalogue;
  const dir = c.copy_dir ?? (config.config.server.state_dir === '' ? undefined : config.config.server.state_dir);
  const copyPath = c.store === 'postgres' && dir !== undefined ? join(dir, `catalogue-copy-${processName.replace(/[^A-Za-z0-9._-]/g, '_')}.ndjson`) : undefined;
  const follower = new CatalogueFollower({ catalogue: config.catalogue, store, pollMs: c.poll, log, ...(copyPath === undefined ? {} : { copyPath }), ...(onApplied === undefined ? {} : { onApplied }) });
  try {
    await follower.start();
  } catch (err) {
    await store.close().catch(() => {});
    throw err;
  }
  return {
    admin: new CatalogueAdmin({ catalogue: config.catalogue, store, follower }),
    follower,
    close: async () => {
      await follower.close();
      await store.close();
    },
  };
}

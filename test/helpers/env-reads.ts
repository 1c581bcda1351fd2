/**
 * The environment variables a node or a router reads for a config file, found by running the
 * project's own code (config loader, cluster secret, admin token) against an environment that
 * records every name asked for. What a deployment file (compose, Helm chart) must provide is then
 * derived from the code, not from a hand-kept list.
 */
import { buildConfig, loadConfig } from '../../src/config/load.ts';
import type { LoadedConfig } from '../../src/config/load.ts';
import { adminToken } from '../../src/ops/admin-server.ts';
import { clusterSecretFor } from '../../src/security/cluster-secret.ts';

/** What {@link envReads} found. */
export interface EnvReads {
  /** Every variable name read, sorted. */
  readonly names: readonly string[];
  /** The config as loaded with the recording environment (every variable "set"). */
  readonly loaded: LoadedConfig;
}

/**
 * Loads a config file (or an already parsed config: `{ raw, name }`) as a node does at start (config, cluster secret, admin token) with an environment
 * in which every variable is set to a distinct 40+ character value that is also a Redis URL, and
 * records the names read.
 * @param extra values returned for these names instead (e.g. a real Redis URL).
 * @throws ConfigError when the config is invalid even with every variable set.
 */
export function envReads(source: string | { readonly raw: unknown; readonly name: string }, extra: Readonly<Record<string, string>> = {}): EnvReads {
  const names = new Set<string>();
  const env = new Proxy({} as NodeJS.ProcessEnv, {
    get: (_target, name) => {
      if (typeof name !== 'string') return undefined;
      names.add(name);
      return extra[name] ?? `redis://unchecked-value-of/${name}`;
    },
  });
  const loaded = typeof source === 'string' ? loadConfig(source, env) : buildConfig(source.raw, source.name, env);
  clusterSecretFor(loaded.config.cluster, env, 'a node');
  adminToken(loaded.config.admin, env);
  return { names: [...names].sort(), loaded };
}

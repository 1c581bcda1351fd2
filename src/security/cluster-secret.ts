/**
 * The cluster secret: one shared key that every router and node of a cluster holds, read from the
 * environment (never from the config file, never from a command line). It authenticates every
 * router → node and node → node HTTP call (`request-signature.ts`) and the member entries nodes
 * write into Redis (`member-entry.ts`).
 *
 * Rotation: `<VAR>_PREVIOUS` (e.g. `QUOTARING_CLUSTER_SECRET_PREVIOUS`) holds a second secret that
 * is accepted but never used to sign. A rotation is three rolling restarts (docs/security.md):
 * accept the new secret (current = old, previous = new), sign with it (current = new, previous =
 * old), drop the old one.
 */
import { createHmac, createSecretKey, timingSafeEqual } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import type { ClusterConfig } from '../config/schema.ts';

/** Environment variable of the secret unless `cluster.secret_env` names another. */
export const DEFAULT_SECRET_ENV = 'QUOTARING_CLUSTER_SECRET';
/** Suffix of the variable holding the previous secret during a rotation. */
export const PREVIOUS_SUFFIX = '_PREVIOUS';
/** Shortest secret accepted, characters (32 random base64 characters carry 192 bits). */
export const MIN_SECRET_LENGTH = 32;

/** Length of a MAC: HMAC-SHA256, bytes. */
export const MAC_BYTES = 32;

/**
 * The current secret (signs and verifies) and, during a rotation, the previous one (verifies only),
 * held as `KeyObject`s: the secret strings are not readable from this object, and it prints as
 * `[ClusterSecret <variable>]`.
 */
export class ClusterSecret {
  /** The environment variable the current secret was read from (for error messages). */
  readonly variable: string;
  /** Whether a previous secret is accepted too (a rotation in progress). */
  readonly rotating: boolean;
  readonly #current: KeyObject;
  readonly #previous: KeyObject | undefined;

  /**
   * @param variable the variable `current` came from (named in errors and logs).
   * @throws RangeError when `current` (or `previous`, if given) is shorter than {@link MIN_SECRET_LENGTH}
   *   or is an unexpanded variable reference such as `${QUOTARING_CLUSTER_SECRET_PREVIOUS:-}` (a public
   *   string: podman-compose 1.0.3 passes such defaults through literally).
   */
  constructor(current: string, previous?: string, variable: string = DEFAULT_SECRET_ENV) {
    if (current.length < MIN_SECRET_LENGTH) throw new RangeError(tooShort(variable, current.length));
    if (previous !== undefined && previous.length < MIN_SECRET_LENGTH) throw new RangeError(tooShort(variable + PREVIOUS_SUFFIX, previous.length));
    for (const [name, value] of [[variable, current], [variable + PREVIOUS_SUFFIX, previous]] as const) {
      if (value !== undefined && UNEXPANDED.test(value)) throw new RangeError(`${name} holds an unexpanded variable reference (\${...}), not a secret: the tool that started this process did not substitute it`);
    }
    this.variable = variable;
    this.rotating = previous !== undefined;
    this.#current = createSecretKey(Buffer.from(current, 'utf8'));
    this.#previous = previous === undefined ? undefined : createSecretKey(Buffer.from(previous, 'utf8'));
  }

  /** HMAC-SHA256 of `data` (UTF-8) with the current secret: {@link MAC_BYTES} bytes. */
  mac(data: string): Buffer {
    return createHmac('sha256', this.#current).update(data, 'utf8').digest();
  }

  /** Whether `mac` is the HMAC-SHA256 of `data` under the current or the previous secret (constant-time compare). */
  matches(data: string, mac: Buffer): boolean {
    if (mac.length !== MAC_BYTES) return false;
    if (timingSafeEqual(mac, this.mac(data))) return true;
    return this.#previous !== undefined && timingSafeEqual(mac, createHmac('sha256', this.#previous).update(data, 'utf8').digest());
  }

  toString(): string {
    return `[ClusterSecret ${this.variable}]`;
  }

  toJSON(): string {
    return this.toString();
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return this.toString();
  }
}

/** A `${NAME}` or `${NAME:-default}` left in a value by a tool that did not substitute it. */
const UNEXPANDED = /\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-=?+][^}]*)?\}/;

function tooShort(variable: string, length: number): string {
  return `${variable} is ${length} characters long: the cluster secret needs at least ${MIN_SECRET_LENGTH} (generate one with: openssl rand -base64 32)`;
}

/**
 * Reads the cluster secret from `env[variable]` and, if set, `env[variable + "_PREVIOUS"]`.
 * @returns undefined when `variable` is unset or empty.
 * @throws RangeError when a value is shorter than {@link MIN_SECRET_LENGTH} (the message names the variable).
 */
export function clusterSecretFromEnv(env: NodeJS.ProcessEnv, variable: string = DEFAULT_SECRET_ENV): ClusterSecret | undefined {
  const current = env[variable];
  if (current === undefined || current === '') return undefined;
  const previous = env[variable + PREVIOUS_SUFFIX];
  return new ClusterSecret(current, previous === undefined || previous === '' ? undefined : previous, variable);
}

/** Whether the cluster settings describe a cluster (static members or Redis membership) rather than a single node. */
export function isCluster(cluster: Pick<ClusterConfig, 'members' | 'redis'>): boolean {
  return cluster.redis !== undefined || cluster.members.length > 0;
}

/**
 * The secret a process with these cluster settings runs with: read from `cluster.secret_env`
 * (default {@link DEFAULT_SECRET_ENV}). A single node needs none (undefined when unset).
 * @param what the process, for the error message (`a node`, `a router`).
 * @throws Error naming the variable when the settings describe a cluster and the variable is unset;
 *   RangeError for a secret that is too short.
 */
export function clusterSecretFor(cluster: Pick<ClusterConfig, 'members' | 'redis' | 'secret_env'>, env: NodeJS.ProcessEnv, what: string): ClusterSecret | undefined {
  const secret = clusterSecretFromEnv(env, cluster.secret_env);
  if (secret === undefined && isCluster(cluster)) throw new Error(missingSecret(cluster.secret_env, what));
  return secret;
}

/** The error message for a cluster process started without its secret. */
export function missingSecret(variable: string, what: string): string {
  return (
    `${variable} is not set: ${what} in a cluster (cluster.members or cluster.redis) needs the cluster secret, ` +
    `at least ${MIN_SECRET_LENGTH} characters and the same in every node and router (e.g. export ${variable}="$(openssl rand -base64 32)"; ` +
    '`quotaring up` generates one for its children)'
  );
}

/**
 * What the in-RAM catalogue holds: the YAML base it layers its rows on, and one small entry per
 * catalogue row (plan, tenant, key), kept small for a million tenants. Shapes only; the catalogue
 * (`catalogue.ts`) fills them and the materialization of a tenant view (`materialize.ts`) reads them.
 */
import type { KeyAccess, Tier } from '../config/access.ts';
import type { Config, PlanConfig, TenantConfig } from '../config/schema.ts';
import type { Policy } from '../limiter/types.ts';
import type { KeyDoc, TenantDoc } from './docs.ts';

/** A catalogue tenant as held in RAM. */
export interface TenantEntry {
  readonly id: string;
  /** Its doc when it holds more than a plan's name (own limits, tiers, labels, metrics). */
  readonly doc: TenantDoc | undefined;
  readonly plan: string | undefined;
  /** The doc as stored (durations and dollars as written), when `doc` is set. */
  readonly raw: Readonly<Record<string, unknown>> | undefined;
  readonly version: number;
  /** Its live keys. */
  keys: KeyEntry[];
}

/** A catalogue key as held in RAM (its hash, never the key). */
export interface KeyEntry {
  readonly id: string;
  readonly tenant: string;
  readonly hash: string;
  /** Its doc when it holds anything (name, limits, tiers). */
  readonly doc: KeyDoc | undefined;
  /** The doc as stored, when `doc` is set. */
  readonly raw: Readonly<Record<string, unknown>> | undefined;
  readonly version: number;
}

/** A catalogue plan as held in RAM, with its compiled policy shared by its tenants. */
export interface PlanEntry {
  readonly plan: PlanConfig;
  readonly raw: Readonly<Record<string, unknown>>;
  readonly version: number;
  policy: Policy | undefined;
}

/** The base the catalogue layers its rows on: the loaded config's YAML lookups. */
export interface CatalogueBase {
  readonly config: Config;
  readonly tiers: ReadonlyMap<string, Tier>;
  /** SHA-256 (base64url) of a YAML key → what it gives. */
  readonly yamlAccess: ReadonlyMap<string, KeyAccess>;
  /** YAML tenant id → its policy. */
  readonly yamlPolicies: ReadonlyMap<string, Policy>;
  /** YAML tenant id → the tenant. */
  readonly yamlTenants: ReadonlyMap<string, TenantConfig>;
}

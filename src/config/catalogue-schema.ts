/**
 * The `catalogue:` section (where tenants managed at runtime are stored) and the id alphabet of the
 * tenant catalogue; plans (`plans:`) are in `schema-plans.ts`. `schema-sections.ts` composes the
 * sections into the whole config.
 */
import { z } from 'zod';
import { parseDuration } from './duration.ts';

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');

/** Plan names, tenant ids and key ids share one alphabet (`.` and `..` alone excepted: they are path segments). */
export const CATALOGUE_ID = /^(?!\.\.?$)[A-Za-z0-9._-]{1,64}$/;

/**
 * Where tenants managed at runtime live (admin API `/admin/v1/tenants`, `quotaring tenants …`):
 * `none` (only the YAML `tenants:` list), `file` (the embedded default for one machine: an
 * append-only file that every process on the machine shares, `path`), or `postgres` (a shared
 * PostgreSQL database for a cluster; its URL, credentials included, from the variable `url_env`).
 */
export const CatalogueSchema = z.strictObject({
  /** @default none */
  store: z.enum(['none', 'file', 'postgres']).default('none'),
  /** The file of `store: file` (relative paths: from the working directory). @default catalogue.ndjson in server.state_dir */
  path: z.string().min(1).optional(),
  /** Variable holding the PostgreSQL URL (`postgres://user:password@host:5432/db`) of `store: postgres`. @default QUOTARING_CATALOGUE_URL */
  url_env: envName.default('QUOTARING_CATALOGUE_URL'),
  /** PostgreSQL schema holding the catalogue's tables. @default quotaring */
  schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a lower-case SQL identifier').default('quotaring'),
  /**
   * Folder where each process keeps its last copy of a `postgres` catalogue, to start from while the
   * database is down (`catalogue-copy-<process>.ndjson`). @default server.state_dir (none when unset)
   */
  copy_dir: z.string().min(1).optional(),
  /** Period of the version check that heals a missed change notification. @default 500ms */
  poll: z.union([z.number().int().min(50).max(10_000), z.string()]).transform((v, ctx) => {
    const ms = typeof v === 'number' ? v : parseDuration(v);
    if (ms === undefined || ms < 50 || ms > 10_000) {
      ctx.addIssue({ code: 'custom', message: 'poll: 50ms ..= 10s' });
      return z.NEVER;
    }
    return ms;
  }).default(500),
});

/** Validated `catalogue:` section (poll in ms). */
export type CatalogueConfig = z.output<typeof CatalogueSchema>;

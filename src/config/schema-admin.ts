/**
 * The `admin:` section: the admin API's listener of nodes and routers and its bearer token.
 */
import { z } from 'zod';

/**
 * The admin API of nodes and routers: its own listener, every route behind a bearer token read
 * from the environment variable `token_env`. Not started when that variable is unset or empty.
 */
export const AdminSchema = z.strictObject({
  /** @default 127.0.0.1 */
  host: z.string().default('127.0.0.1'),
  /** Admin port of a node (`--admin-port` overrides; 0: any free port). @default 9100 */
  port: z.number().int().min(0).max(65535).default(9100),
  /** Admin port of a router, which also serves the dashboard and the live stream. @default 9200 */
  router_port: z.number().int().min(0).max(65535).default(9200),
  /** Environment variable holding the bearer token. @default QUOTARING_ADMIN_TOKEN */
  token_env: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name').default('QUOTARING_ADMIN_TOKEN'),
});

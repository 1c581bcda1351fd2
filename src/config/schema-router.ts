/**
 * The `router:` section: a router's listener.
 */
import { z } from 'zod';
import { listenerLimits } from './schema-listeners.ts';

/** Listening settings of a router. */
export const RouterSchema = z.strictObject({
  /** @default 127.0.0.1 */
  host: z.string().default('127.0.0.1'),
  /** @default 8080 */
  port: z.number().int().min(0).max(65535).default(8080),
  ...listenerLimits,
});

/**
 * The units config values are written in, shared by every section of the schema: durations, byte
 * sizes, US-dollar amounts, positive integers and environment variable names.
 */
import { z } from 'zod';
import { parseDuration } from './duration.ts';
import { parseUsdMicros } from '../pricing/usd.ts';

/** A duration: ms as a number, or a string like `1m`, `500ms`, `1h30m`. Output: ms. */
export const duration = z.union([z.number().nonnegative(), z.string()]).transform((value, ctx) => {
  if (typeof value === 'number') return value;
  const ms = parseDuration(value);
  if (ms === undefined) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is not a duration (use e.g. 500ms, 1s, 1m, 1h, 1d)` });
    return z.NEVER;
  }
  return ms;
}).meta({ format: 'duration' });

/** A whole number above 0. */
export const positiveInt = z.number().int().positive();

/** Byte sizes: a number, or `512kb`, `1mb`. Output: bytes. */
export const byteSize = z.union([z.number().int().positive(), z.string()]).transform((value, ctx) => {
  if (typeof value === 'number') return value;
  const m = /^(\d+)\s*(b|kb|mb)$/i.exec(value);
  if (m === null) {
    ctx.addIssue({ code: 'custom', message: `"${value}" is not a size (use e.g. 1048576, 512kb, 1mb)` });
    return z.NEVER;
  }
  const unit = (m[2] ?? 'b').toLowerCase();
  return Number(m[1]) * (unit === 'mb' ? 1_048_576 : unit === 'kb' ? 1_024 : 1);
}).meta({ format: 'bytes' });

/**
 * A US-dollar amount: a number (`2.5`) or a decimal string (`"0.075"`, `"$50"`), at most 6 decimal
 * places. Output: integer micro-dollars, read exactly from the decimal text (see `src/pricing/usd.ts`).
 */
export const usd = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const micros = parseUsdMicros(value);
  if (micros === undefined) {
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(value)} is not an amount of US dollars (a number ≥ 0 with at most 6 decimals, e.g. 2.5 or "0.075")` });
    return z.NEVER;
  }
  return micros;
});

/** The name of an environment variable. */
export const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');

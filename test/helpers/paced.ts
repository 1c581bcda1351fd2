/**
 * Open-loop load for fault tests: each tenant sends at its own steady rate, phases spread over one
 * interval so the tenants do not fire together, whatever the answers take.
 */
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Calls `send(t)` for every tenant at `1000 / t.ratePerS` ms intervals from `t0` (clock ms) until
 * `runMs` after it; tenant i starts `i / tenants.length` of its interval late. Resolves once the last
 * send was fired (not answered).
 */
export async function sendPaced<T extends { readonly ratePerS: number }>(tenants: readonly T[], t0: number, runMs: number, send: (t: T) => void): Promise<void> {
  await Promise.all(
    tenants.map(async (t, i) => {
      const interval = 1_000 / t.ratePerS;
      const phase = (interval * i) / tenants.length;
      for (let n = 0; ; n++) {
        const due = t0 + phase + n * interval;
        if (due - t0 >= runMs) break;
        if (due > Date.now()) await sleep(due - Date.now());
        send(t);
      }
    }),
  );
}

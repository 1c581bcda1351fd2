/** A Redis guard's counters as metric series. */
import type { GuardStats } from '../redis/guard.ts';

/** A guard's counters as `quotaring_redis_guard_calls_total` series. */
export function guardResults(guard: string, stats: GuardStats): { guard: string; result: 'ok' | 'timeout' | 'error' | 'open'; n: number }[] {
  return [
    { guard, result: 'ok', n: stats.ok },
    { guard, result: 'timeout', n: stats.timeouts },
    { guard, result: 'error', n: stats.errors },
    { guard, result: 'open', n: stats.rejectedOpen },
  ];
}

/**
 * Which member entries in Redis a process believes (`RedisMembership` reads them every heartbeat),
 * and the rate-limited reports of those it ignores.
 *
 * Signature: entries are signed with the cluster secret (`src/security/member-entry.ts`): an entry
 * without a valid signature never joins the ring (it is counted, and reported to `onRejectedEntry`
 * listeners at most once per {@link REJECT_REPORT_MS}).
 *
 * Freshness: the signature covers `{id,url,weight}`, not the score, so a copy of a real node's entry
 * verifies forever. Only the score (the heartbeat's Redis time) says it is live, and a score is
 * believed only inside `[now − deadAfterMs, now + futureSkewMs]`: an entry written with a score far
 * in the future (a replay at 9e15) is never read into a ring, and nodes delete it. At most
 * {@link MAX_ENTRIES_READ} entries are read per sync, so junk entries cost a bounded amount of work.
 * What remains: someone with write access to Redis can keep a departed member's signed entry in the
 * ring by rewriting it with a current score every heartbeat (and must then also take over its
 * address to receive anything), or fill the window with junk to crowd out live members. That is why
 * Redis must stay private (docs/security.md, "What must stay private").
 */
import type { ClusterSecret } from '../../security/cluster-secret.ts';
import { readMemberEntry } from '../../security/member-entry.ts';
import type { MemberEntryProblem } from '../../security/member-entry.ts';
import type { Member, RejectedMemberEntry } from '../types.ts';

/**
 * Entries read per sync at most (`ZRANGEBYSCORE ... LIMIT 0 n`, oldest live score first): a real
 * cluster has far fewer members; beyond it, Redis holds junk. Hitting it is counted and reported.
 */
export const MAX_ENTRIES_READ = 1_024;
/** Scores up to this far ahead of Redis time are believed (clock steps between TIME reads), ms; at least 2 heartbeats. */
export const MIN_FUTURE_SKEW_MS = 5_000;
/** Nodes delete entries scored more than this ahead of Redis time, ms (more than any skew). */
export const FUTURE_PRUNE_MS = 60_000;
/** Rejected entries are reported to listeners at most once per this many ms (with a count). */
export const REJECT_REPORT_MS = 10_000;
/** A read that hit {@link MAX_ENTRIES_READ} is reported at most once per this many ms (with a count). */
export const CAP_REPORT_MS = 60_000;

/** Work done by one {@link RedisMembership}, for tests and metrics. */
export interface RedisMembershipStats {
  /** Entries read from Redis and checked (JSON parse + HMAC), over all syncs. */
  readonly entriesChecked: number;
  /** Syncs whose read hit {@link MAX_ENTRIES_READ}. */
  readonly readCapHits: number;
  /** Reports sent to `onRejectedEntry` listeners (rejections and cap hits). */
  readonly reports: number;
}

/** A member entry believed by a read, with its score (Redis time of its last heartbeat, ms). */
export interface EntrySeen {
  readonly member: Member;
  readonly score: number;
}

/**
 * Takes a read's `[json, score, json, score, ...]` and keeps the newest entry per id scored in
 * `[minScore, maxScore]` whose signature verifies under `secret`, skipping members recorded in
 * `drops` (but never `selfId`). Counts checked and rejected entries in `reports`.
 * @returns the entries kept, by member id.
 */
export function readEntries(
  flat: readonly string[],
  window: { readonly minScore: number; readonly maxScore: number },
  drops: Readonly<Record<string, string>>,
  selfId: string | undefined,
  secret: ClusterSecret,
  reports: EntryReports,
): Map<string, EntrySeen> {
  const newest = new Map<string, EntrySeen>();
  const rejected = new Set<string>();
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const raw = flat[i] ?? '';
    const score = Number(flat[i + 1]);
    if (!(score >= window.minScore && score <= window.maxScore)) continue;
    reports.checked();
    const read = readMemberEntry(raw, secret);
    if (!('member' in read)) {
      rejected.add(raw);
      reports.rejected(raw, read);
      continue;
    }
    const member = read.member;
    // Dropped by a process in contact and not back since (it acknowledges its drop when it sees it):
    // a heartbeat it sent before knowing, delivered late (a healed link), does not bring it back.
    if (Object.hasOwn(drops, member.id) && member.id !== selfId) continue;
    const seen = newest.get(member.id);
    if (seen === undefined || score > seen.score) newest.set(member.id, { member, score });
  }
  reports.readDone(rejected);
  return newest;
}

/**
 * Counts of entries checked and ignored, and their reports: at most one per {@link REJECT_REPORT_MS}
 * for rejected entries and one per {@link CAP_REPORT_MS} for reads that hit {@link MAX_ENTRIES_READ}.
 */
export class EntryReports {
  /** Entries rejected in the last read (at most {@link MAX_ENTRIES_READ}): one still there is not counted again. */
  #rejectedLastRead = new Set<string>();
  #rejectedTotal = 0;
  /** Rejections and cap hits not reported yet (the first of each kept as the example), the clock ms of the last reports, and the last report (for late listeners). */
  #pendingRejected: { entry: RejectedMemberEntry; count: number } | undefined;
  #pendingCapHits = 0;
  #rejectReportedAt = -Infinity;
  #capReportedAt = -Infinity;
  #lastReport: RejectedMemberEntry | undefined;
  #entriesChecked = 0;
  #readCapHits = 0;
  #reports = 0;
  readonly #listeners = new Set<(entry: RejectedMemberEntry) => void>();

  /** An entry in the window was checked. */
  checked(): void {
    this.#entriesChecked++;
  }

  /** Entry `raw` did not verify: counted unless the previous read rejected it too. */
  rejected(raw: string, read: { readonly problem: MemberEntryProblem; readonly id?: string }): void {
    if (this.#rejectedLastRead.has(raw)) return;
    this.#rejectedTotal++;
    if (this.#pendingRejected === undefined) this.#pendingRejected = { entry: { ...(read.id === undefined ? {} : { id: read.id }), problem: read.problem }, count: 0 };
    this.#pendingRejected.count++;
  }

  /** A read ended, having rejected `rejected` (raw entries). */
  readDone(rejected: Set<string>): void {
    this.#rejectedLastRead = rejected;
  }

  /** A read hit {@link MAX_ENTRIES_READ}. */
  capHit(): void {
    this.#readCapHits++;
    this.#pendingCapHits++;
  }

  /**
   * Sends the pending reports whose interval has passed (at clock ms `now`); a listener that throws
   * is reported to `onError`.
   */
  report(now: number, onError: (err: Error) => void): void {
    const due: RejectedMemberEntry[] = [];
    if (this.#pendingRejected !== undefined && now - this.#rejectReportedAt >= REJECT_REPORT_MS) {
      due.push({ ...this.#pendingRejected.entry, count: this.#pendingRejected.count });
      this.#pendingRejected = undefined;
      this.#rejectReportedAt = now;
    }
    if (this.#pendingCapHits > 0 && now - this.#capReportedAt >= CAP_REPORT_MS) {
      due.push({ problem: 'too_many_entries', count: this.#pendingCapHits });
      this.#pendingCapHits = 0;
      this.#capReportedAt = now;
    }
    for (const entry of due) {
      this.#lastReport = entry;
      this.#reports++;
      for (const listener of [...this.#listeners]) {
        try {
          listener(entry);
        } catch (err) {
          onError(err instanceof Error ? err : new Error(String(err)));
        }
      }
    }
  }

  /** Adds a listener (it first hears the last report, if any); returns the unsubscribe function. */
  listen(listener: (entry: RejectedMemberEntry) => void): () => void {
    if (this.#lastReport !== undefined) listener(this.#lastReport);
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** Entries rejected so far (one left in Redis counts once). */
  get total(): number {
    return this.#rejectedTotal;
  }

  /** Work counters. */
  stats(): RedisMembershipStats {
    return { entriesChecked: this.#entriesChecked, readCapHits: this.#readCapHits, reports: this.#reports };
  }
}

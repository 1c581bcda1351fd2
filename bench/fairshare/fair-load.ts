/**
 * The fairness half of `npm run bench:fair-share`: one load of four tenants on two deployments that
 * differ only in `fair_share` (on, and off = first come, first served), counted at the provider.
 *
 * The cluster: Redis, the simulator (each deployment its own API key, so its own provider quota,
 * enforced per key at `QUOTA_TPM`), n nodes and a router. Each round has its own pair of
 * deployments (`fair-<r>`, `fcfs-<r>`: fresh buckets and demand tables), both `tpm: QUOTA_TPM`,
 * headroom 0.9, `algorithm: sliding_window`; `fair-<r>` adds `fair_share: { reserve: 0.5 }` (the
 * setting docs/limits.md gives for a sliding window). The same four tenants send the same schedule
 * to both at once, so both see the same machine, the same owners and the same instants: A asks 5×
 * the quota, B and C 10% each, D 30% in bursts (idle `D_IDLE_S`, then asking for `D_BURST_S`, again
 * and again). Every request is 1,000 tokens (an 800-token prompt counted exactly, 200 out).
 *
 * What is counted, from the simulator's arrival log (by key and by the body's `user`): each tenant's
 * admitted requests from `WARM_S` to the end of the round (the first seconds spend the bucket's
 * initial burst and fill the demand tables), its fair share over the same time (1 s slots, each the
 * weighted max-min water-fill of the cluster's steady rate, quota × headroom / 60 s, over the
 * tenants asking in that slot by the schedule), and x = admitted / fair share; Jain's index over
 * the four x; utilisation = admitted / (quota × headroom) over the same time (demand is above the
 * quota throughout: A alone asks 5×); the most tokens in any 60 s window at the provider and the
 * provider's 429s (both must stay within the quota); the gateway's refusals by error code.
 */
import { setMaxListeners } from 'node:events';
import { Agent, request } from 'undici';
import { waterFill } from '../../src/fairshare/water-fill.ts';
import { PromptBuilder } from '../../src/replay/prompt.ts';
import { startLoad } from '../../test/helpers/load-sender.ts';
import { startBenchCluster } from '../lib/bench-cluster.ts';
import { freePort } from '../lib/cluster-processes.ts';
import type { ProcessGroup } from '../lib/cluster-processes.ts';
import { jainIndex } from './jain.ts';

/** The provider quota of each deployment, tokens a minute. */
export const QUOTA_TPM = 300_000;
export const HEADROOM = 0.9;
/** Tokens of every request: an 800-token prompt and 200 out. */
export const TOKENS = 1_000;
/** The cluster's steady rate, requests a second (quota × headroom a minute). */
export const CAP_PER_S = (QUOTA_TPM * HEADROOM) / 60 / TOKENS;
const QUOTA_PER_S = QUOTA_TPM / 60 / TOKENS;
/** Requests a second each tenant asks (D while it bursts): A 5× the quota, B and C 10%, D 30%. */
export const RATE = { A: 5 * QUOTA_PER_S, B: 0.1 * QUOTA_PER_S, C: 0.1 * QUOTA_PER_S, D: 0.3 * QUOTA_PER_S } as const;
export type Letter = keyof typeof RATE;
export const LETTERS: readonly Letter[] = ['A', 'B', 'C', 'D'];
/** Seconds from a round's start not counted. */
export const WARM_S = 10;
/** D is idle this long, then bursts for `D_BURST_S`, and again, from the round's start. */
export const D_IDLE_S = 10;
export const D_BURST_S = 15;
export const MODES = ['fair', 'fcfs'] as const;
export type Mode = (typeof MODES)[number];

/** What one mode got in one round. */
export interface ModeRound {
  readonly mode: Mode;
  readonly round: number;
  /** Seconds counted (from `WARM_S` to the end). */
  readonly countedS: number;
  /** Per tenant: requests sent, admitted at the provider (counted time), its fair share (requests), x = admitted / fair. */
  readonly tenants: Readonly<Record<Letter, { sent: number; admitted: number; fair: number; normalised: number; refusals: Record<string, number> }>>;
  readonly jain: number;
  /** Admitted at the provider (counted time) / (quota × headroom over that time). */
  readonly utilisationOfCap: number;
  /** The same against the whole quota. */
  readonly utilisationOfQuota: number;
  /** Most tokens in any 60 s window ending at an arrival, whole round (the run is shorter than 60 s: its total). */
  readonly most60sTokens: number;
  readonly provider429: number;
  /** Answers neither 200 nor 429, or failed (client side). */
  readonly odd: number;
}

/** Whether D asks at `s` seconds into a round. */
export function dAsks(s: number): boolean {
  const period = D_IDLE_S + D_BURST_S;
  return s % period >= D_IDLE_S;
}

/** D's bursts within a round of `runS` seconds: [from, until) s. */
export function dBursts(runS: number): [number, number][] {
  const out: [number, number][] = [];
  for (let from = D_IDLE_S; from < runS; from += D_IDLE_S + D_BURST_S) out.push([from, Math.min(runS, from + D_BURST_S)]);
  return out;
}

/** Each tenant's fair share of `CAP_PER_S` over [fromS, untilS), requests: water-filled per 1 s slot over who asks in it. */
export function fairShares(fromS: number, untilS: number): Record<Letter, number> {
  const owed: Record<Letter, number> = { A: 0, B: 0, C: 0, D: 0 };
  for (let s = fromS; s < untilS; s++) {
    const claims = LETTERS.filter((l) => l !== 'D' || dAsks(s)).map((l) => ({ id: l, demand: RATE[l], weight: 1, floor: 0 }));
    const share = waterFill(CAP_PER_S, claims).share;
    for (const l of LETTERS) owed[l] += Math.min(RATE[l], share.get(l) ?? 0) * Math.min(1, untilS - s);
  }
  return owed;
}

interface Arrival {
  readonly at: number;
  readonly user: string | null;
  readonly status: number | null;
  readonly key: string;
}

/** Options of {@link runFairness}. */
export interface FairnessOptions {
  readonly group: ProcessGroup;
  readonly nodes: number;
  readonly rounds: number;
  /** Seconds per round. */
  readonly runS: number;
  readonly log: (line: string) => void;
}

// The load sender's streams (12 in a 75 s round) each wait on its one stop signal: past the default 10.
setMaxListeners(64);

const keyOf = (mode: Mode, round: number): string => `sim-key-${mode}-${round}`;

/**
 * Starts the simulator and the cluster in `group`, runs the rounds one after another and returns
 * what each mode got in each; the processes are left to the caller's group.
 * @throws Error when a process does not come up, or the arrival log lost entries.
 */
export async function runFairness(o: FairnessOptions): Promise<ModeRound[]> {
  const simPort = await freePort();
  const simUrl = `http://127.0.0.1:${simPort}`;
  const rounds = Array.from({ length: o.rounds }, (_, i) => i + 1);
  const deployments = rounds.flatMap((r) => MODES.map((mode) => ({ mode, round: r, name: `${mode}-${r}`, env: `SIM_KEY_${mode.toUpperCase()}_${r}` })));
  const env = Object.fromEntries(deployments.map((d) => [d.env, keyOf(d.mode, d.round)]));
  await o.group.cli('simulator', ['simulate', '--port', String(simPort), '--tpm', String(QUOTA_TPM)], `${simUrl}/sim/stats`);
  const cluster = await startBenchCluster(o.group, {
    tag: 'fair',
    nodes: o.nodes,
    mode: 'sharded',
    env,
    config: {
      tenants: LETTERS.map((l) => ({ id: l, keys: [`bench-fair-key-${l}`], limits: [] })),
      models: deployments.map((d) => ({ name: `m-${d.name}`, encoding: 'o200k_base', estimator: 'exact', deployments: [d.name] })),
      deployments: deployments.map((d) => ({
        name: d.name,
        provider: 'openai',
        base_url: simUrl,
        api_key_env: d.env,
        quota: { tpm: QUOTA_TPM, algorithm: 'sliding_window' },
        headroom: HEADROOM,
        ...(d.mode === 'fair' ? { fair_share: { reserve: 0.5 } } : {}),
      })),
    },
  });
  const prompts = new PromptBuilder({ model: 'gpt-4o-mini' });
  const prompt = prompts.body(800);
  const out: ModeRound[] = [];
  for (const round of rounds) {
    o.log(`fairness round ${round}/${o.rounds}: ${o.runS} s, fair share on and off at once on ${cluster.name}...`);
    const res = await oneRound(cluster.url, simUrl, round, o.runS, prompt);
    for (const r of res) o.log(`  ${r.mode}: Jain ${r.jain.toFixed(3)}, utilisation ${(100 * r.utilisationOfCap).toFixed(1)}% of the cap, x = ${LETTERS.map((l) => `${l} ${r.tenants[l].normalised.toFixed(2)}`).join(', ')}`);
    out.push(...res);
  }
  return out;
}

interface Stream {
  readonly id: string;
  readonly mode: Mode;
  readonly letter: Letter;
  readonly ratePerS: number;
  readonly fromMs?: number;
  readonly untilMs: number;
}

async function oneRound(router: string, simUrl: string, round: number, runS: number, prompt: object): Promise<ModeRound[]> {
  const runMs = runS * 1_000;
  const streams: Stream[] = MODES.flatMap((mode) =>
    LETTERS.flatMap((letter): Stream[] => {
      const id = `${mode}|${letter}`;
      if (letter !== 'D') return [{ id, mode, letter, ratePerS: RATE[letter], untilMs: runMs }];
      return dBursts(runS).map(([f, u]) => ({ id, mode, letter, ratePerS: RATE.D, fromMs: f * 1_000, untilMs: u * 1_000 }));
    }),
  );
  const bodies = new Map(streams.map((s) => [s.id, JSON.stringify({ ...prompt, model: `m-${s.mode}-${round}`, max_tokens: 200, user: s.letter })]));
  const agent = new Agent({ connections: 128 });
  const load = startLoad<Stream, { code: string }>({
    streams,
    stagger: true,
    relative: true,
    url: `${router}/v1/chat/completions`,
    headers: (s) => ({ authorization: `Bearer bench-fair-key-${s.letter}`, 'content-type': 'application/json' }),
    body: (s) => bodies.get(s.id) as string,
    dispatcher: agent,
    timeoutMs: 30_000,
    fields: () => ({ code: '' }),
    onAnswer: (rec, res) => {
      if (res.statusCode !== 200) rec.code = String(res.headers['x-quotaring-error'] ?? res.statusCode);
    },
  });
  await load.ended;
  await load.settled();
  await agent.close();
  const t0 = load.t0;
  const snap = (await (await request(`${simUrl}/sim/arrivals?since=${t0}`)).body.json()) as { arrivals: Arrival[]; evicted: number };
  if (snap.evicted > 0) throw new Error(`the simulator's arrival log lost ${snap.evicted} entries: the counts would be short`);
  const fair = fairShares(WARM_S, runS);
  const countedS = runS - WARM_S;
  return MODES.map((mode): ModeRound => {
    const arrivals = snap.arrivals.filter((a) => a.key === keyOf(mode, round));
    const counted = arrivals.filter((a) => a.status === 200 && a.at >= t0 + WARM_S * 1_000 && a.at < t0 + runMs);
    const sent = load.sent.filter((s) => s.tenant.startsWith(`${mode}|`));
    const tenants = Object.fromEntries(
      LETTERS.map((l) => {
        const mine = sent.filter((s) => s.tenant === `${mode}|${l}`);
        const refusals: Record<string, number> = {};
        for (const s of mine) if (s.status !== 200) refusals[s.code || String(s.status)] = (refusals[s.code || String(s.status)] ?? 0) + 1;
        const admitted = counted.filter((a) => a.user === l).length;
        return [l, { sent: mine.length, admitted, fair: fair[l], normalised: fair[l] > 0 ? admitted / fair[l] : 0, refusals }];
      }),
    ) as ModeRound['tenants'];
    let most = 0;
    const ok = arrivals.filter((a) => a.status === 200);
    for (let i = 0, j = 0; i < ok.length; i++) {
      while ((ok[j] as Arrival).at <= (ok[i] as Arrival).at - 60_000) j++;
      most = Math.max(most, (i - j + 1) * TOKENS);
    }
    return {
      mode,
      round,
      countedS,
      tenants,
      jain: jainIndex(LETTERS.map((l) => tenants[l].normalised)),
      utilisationOfCap: counted.length / (CAP_PER_S * countedS),
      utilisationOfQuota: counted.length / (QUOTA_PER_S * countedS),
      most60sTokens: most,
      provider429: arrivals.filter((a) => a.status === 429).length,
      odd: sent.filter((s) => s.status !== 200 && s.status !== 429).length,
    };
  });
}

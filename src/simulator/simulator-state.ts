/**
 * Everything one simulator instance keeps: resolved options, the per-key quota, counters, the
 * arrival log, the fault PRNG, the prompt counter and the reply id sequence.
 */
import { ArrivalLog } from './arrivals.ts';
import { FaultPicker } from './faults.ts';
import { resolveSimulatorOptions, type ResolvedSimulatorOptions, type SimulatorOptions } from './options.ts';
import { PromptTokens } from './prompt-tokens.ts';
import { OutsideClient } from './outside.ts';
import { KeyQuota } from './quota.ts';
import { ResponseStore } from './response-store.ts';
import { StatsCounters } from './stats.ts';

/** State of one simulator (one per `buildSimulator`). */
export class SimulatorState {
  readonly opts: ResolvedSimulatorOptions;
  readonly quota: KeyQuota;
  readonly stats = new StatsCounters();
  /** Requests received on model routes, served by `GET /sim/arrivals`. */
  readonly arrivals: ArrivalLog;
  readonly faults: FaultPicker;
  readonly prompts = new PromptTokens();
  /** Responses stored for `GET /v1/responses/{id}` and `previous_response_id`. */
  readonly responses: ResponseStore;
  /** The outside client spending part of one key's quota (`outside.ts`), if one is set. */
  outside: OutsideClient | undefined;
  #seq = 0;

  /** @throws RangeError when an option is out of range (see `resolveSimulatorOptions`). */
  constructor(opts: SimulatorOptions = {}) {
    this.opts = resolveSimulatorOptions(opts);
    this.quota = new KeyQuota(this.opts.clock, this.opts.rpm, this.opts.tpm);
    this.faults = new FaultPicker(this.opts.seed, this.opts);
    this.responses = new ResponseStore(this.opts.clock);
    this.arrivals = new ArrivalLog(this.opts.arrivalLogSize);
    if (opts.outside !== undefined) this.setOutside(opts.outside.key, opts.outside.fraction);
  }

  /**
   * Sets (or, with fraction 0, stops) the outside client of `key`; a new one replaces the last.
   * @throws RangeError for a fraction outside [0, 1], an empty key, or no quota configured.
   */
  setOutside(key: string, fraction: number): void {
    if (fraction !== 0 && !(fraction > 0 && fraction <= 1)) throw new RangeError(`outside fraction must be in [0, 1], got ${fraction}`);
    this.outside?.stop();
    this.outside = fraction === 0 ? undefined : new OutsideClient(this.quota, this.opts.clock, key, fraction);
  }

  /** A fresh id with `prefix`, e.g. `chatcmpl-sim1a`. Unique within this simulator. */
  nextId(prefix: string): string {
    return prefix + (++this.#seq).toString(36);
  }

  /** Zeroes the counters (not `inFlight`), empties the arrival log and refills every key's quota. */
  reset(): void {
    this.stats.reset();
    this.arrivals.reset();
    this.quota.reset();
  }
}

/**
 * Everything one simulator instance keeps: resolved options, the per-key quota, counters, the
 * arrival log, the fault PRNG, the prompt counter and the reply id sequence.
 */
import { ArrivalLog } from './arrivals.ts';
import { FaultPicker } from './faults.ts';
import { resolveSimulatorOptions, type ResolvedSimulatorOptions, type SimulatorOptions } from './options.ts';
import { PromptTokens } from './prompt-tokens.ts';
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
  #seq = 0;

  /** @throws RangeError when an option is out of range (see `resolveSimulatorOptions`). */
  constructor(opts: SimulatorOptions = {}) {
    this.opts = resolveSimulatorOptions(opts);
    this.quota = new KeyQuota(this.opts.clock, this.opts.rpm, this.opts.tpm);
    this.faults = new FaultPicker(this.opts.seed, this.opts);
    this.responses = new ResponseStore(this.opts.clock);
    this.arrivals = new ArrivalLog(this.opts.arrivalLogSize);
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

/**
 * Soft failures of deployments: a deployment whose replies start later than its `soft_ttft` (time
 * from sending the request to the reply's first byte, as a moving average) is slow, and a share
 * (`soft_share`) of the new requests that would start on it are moved to another deployment of the
 * same wire format until its latency recovers. The slow deployment keeps the rest of its requests,
 * which measure it; an average not refreshed for {@link STALE_MS} counts as recovered. A deployment
 * that failed hard (no connection, a 5xx, a 429 after its retries) is down for {@link DOWN_MS}: new
 * requests do not start on it meanwhile (failover may still try it).
 */
import type { Clock } from '../clock.ts';
import type { ResolvedDeployment } from '../config/load.ts';

/** Weight of a new sample in the moving average. */
const ALPHA = 0.3;
/** A deployment not measured for this long is trusted again, ms. */
const STALE_MS = 30_000;
/** How long a deployment that failed hard is not started on, ms. */
export const DOWN_MS = 5_000;

interface Health {
  /** Moving average of the time to the reply's first byte, ms. */
  ttftMs: number;
  at: number;
  /** Accumulates `soft_share` per request that would start here; a request is moved each time it reaches 1. */
  credit: number;
}

/** Time-to-first-byte averages per deployment, and the share of requests moved off slow ones. */
export class DeploymentHealth {
  readonly #clock: Clock;
  readonly #byName = new Map<string, Health>();
  /** Deployment name → until when it is down (clock ms). */
  readonly #downUntil = new Map<string, number>();

  constructor(clock: Clock) {
    this.#clock = clock;
  }

  /** Records a reply of `deployment` whose first byte came `ttftMs` after the request was sent. */
  record(deployment: ResolvedDeployment, ttftMs: number): void {
    if (deployment.soft_ttft === undefined) return;
    const now = this.#clock.now();
    const h = this.#byName.get(deployment.name);
    if (h === undefined || now - h.at > STALE_MS) this.#byName.set(deployment.name, { ttftMs, at: now, credit: h?.credit ?? 0 });
    else {
      h.ttftMs += ALPHA * (ttftMs - h.ttftMs);
      h.at = now;
    }
  }

  /** Marks a deployment down for {@link DOWN_MS} after a hard failure. */
  failed(deployment: ResolvedDeployment): void {
    this.#downUntil.set(deployment.name, this.#clock.now() + DOWN_MS);
  }

  /** True within {@link DOWN_MS} of the deployment's last hard failure. */
  isDown(deployment: ResolvedDeployment): boolean {
    const until = this.#downUntil.get(deployment.name);
    if (until === undefined) return false;
    if (this.#clock.now() < until) return true;
    this.#downUntil.delete(deployment.name);
    return false;
  }

  /** True when the deployment's replies start later than its `soft_ttft` (on average, recently). */
  isSlow(deployment: ResolvedDeployment): boolean {
    const limit = deployment.soft_ttft;
    if (limit === undefined) return false;
    const h = this.#byName.get(deployment.name);
    return h !== undefined && this.#clock.now() - h.at <= STALE_MS && h.ttftMs > limit;
  }

  /**
   * For a request that would start on `deployment`: true when it should go elsewhere — the
   * deployment is slow and this request falls in its `soft_share` (deterministically: every
   * 1 / share-th request).
   */
  shouldMove(deployment: ResolvedDeployment): boolean {
    if (!this.isSlow(deployment)) return false;
    const h = this.#byName.get(deployment.name) as Health;
    h.credit += deployment.soft_share;
    if (h.credit < 1) return false;
    h.credit -= 1;
    return true;
  }
}

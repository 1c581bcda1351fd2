/** The fair-share series of a node (`src/fairshare/`), read at scrape time, never on the request path. */
import { Counter, Gauge } from 'prom-client';
import type { Registry } from 'prom-client';
import { setCounter } from './scrape-counter.ts';

/** One tenant's fair share of one bucket kind of a fair-shared deployment, read at scrape time (units per 60 s window). */
export interface FairShareLevel {
  readonly deployment: string;
  /** The bucket's unit: `requests` or `tokens`. */
  readonly kind: string;
  readonly tenant: string;
  /** The tenant's share on this node. */
  readonly share: number;
  /** The tenant's demand as this node's table counts it (the cluster's, from every node's reports, or this node's alone). */
  readonly demand: number;
}

/** What the fair-share series read (a subset of the node's gauge sources). */
export interface FairShareSources {
  fairShares?(): readonly FairShareLevel[];
  fairExchanges?(): Readonly<Record<'ok' | 'failed' | 'invalid', number>> | undefined;
}

/** `quotaring_fair_share`, `quotaring_fair_demand` and `quotaring_fair_exchanges_total`, read at scrape time. */
export function fairShareMetrics(registry: Registry, src: () => FairShareSources | undefined): void {
  new Gauge({
    name: 'quotaring_fair_share',
    help: 'Fair share on this node of tenants with metrics: true, per fair-shared deployment and bucket kind, units per minute.',
    labelNames: ['deployment', 'kind', 'tenant'],
    registers: [registry],
    collect() {
      this.reset();
      for (const l of src()?.fairShares?.() ?? []) this.set({ deployment: l.deployment, kind: l.kind, tenant: l.tenant }, l.share);
    },
  });
  new Gauge({
    name: 'quotaring_fair_demand',
    help: 'Demand of tenants with metrics: true as this node\'s fair-share table counts it, per fair-shared deployment and bucket kind, units per minute.',
    labelNames: ['deployment', 'kind', 'tenant'],
    registers: [registry],
    collect() {
      this.reset();
      for (const l of src()?.fairShares?.() ?? []) this.set({ deployment: l.deployment, kind: l.kind, tenant: l.tenant }, l.demand);
    },
  });
  new Counter({
    name: 'quotaring_fair_exchanges_total',
    help: 'Fair-share demand report exchanges through Redis, by outcome: ok, failed (error or timeout), invalid (reports read that did not validate, left out).',
    labelNames: ['outcome'],
    registers: [registry],
    collect() {
      const n = src()?.fairExchanges?.();
      if (n === undefined) return;
      for (const outcome of ['ok', 'failed', 'invalid'] as const) setCounter(this, { outcome }, n[outcome]);
    },
  });
}

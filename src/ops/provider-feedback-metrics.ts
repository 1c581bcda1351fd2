/** The provider-feedback series of a node (`src/globalcap/provider-feedback.ts`), read at scrape time. */
import { Counter } from 'prom-client';
import type { Registry } from 'prom-client';
import { setCounter } from './scrape-counter.ts';

/** One cumulative count of provider feedback: deployment, bucket kind, result. */
export interface ProviderFeedbackCount {
  readonly deployment: string;
  /** `requests` or `tokens`. */
  readonly kind: string;
  /** `lowered`, `capped`, `unchanged`, `failed` or `invalid` (docs/metrics.md). */
  readonly result: string;
  readonly n: number;
}

/** `quotaring_provider_feedback_total`, read at scrape time from `read` (absent: no series). */
export function providerFeedbackMetrics(registry: Registry, read: () => readonly ProviderFeedbackCount[] | undefined): void {
  new Counter({
    name: 'quotaring_provider_feedback_total',
    help: 'Provider rate-limit headers of successful replies applied to deployment quotas, by deployment, kind and result: lowered (the cluster bucket lowered toward what the provider has left), capped (max_outside reached), unchanged, failed (Redis), invalid (a header value left out).',
    labelNames: ['deployment', 'kind', 'result'],
    registers: [registry],
    collect() {
      for (const c of read() ?? []) setCounter(this, { deployment: c.deployment, kind: c.kind, result: c.result }, c.n);
    },
  });
}

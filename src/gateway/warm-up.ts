/** Start-up work that keeps a node's first requests fast. */
import type { LoadedConfig } from '../config/load.ts';
import { exactCounter } from '../tokens/index.ts';

/**
 * Builds the vocabularies exact counting will use (~100 ms each, o200k_base), so that a node does not
 * stall its event loop on its first requests (and fail routers' health checks) after it joins.
 */
export function warmExactCounters(config: LoadedConfig, cacheEntries: number): void {
  const anyTenantExact = config.config.tenants.some((t) => t.estimator === 'exact');
  for (const model of config.config.models) {
    if (model.encoding !== 'none' && (model.estimator === 'exact' || anyTenantExact)) exactCounter(model.encoding, cacheEntries).count('warm up');
  }
}

/**
 * Model → deployment routing and the counting mode of a request: the deployment of the endpoint's
 * format with the most quota headroom serves it, the others (in config order) take over on a hard
 * failure (see `runExchange`).
 */
import type { ResolvedDeployment } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import { GatewayError } from '../errors.ts';
import type { EncodingName } from '../tokens/index.ts';
import type { GatewayContext } from './context.ts';

/** A model and the deployment that will serve it. */
export interface Route {
  readonly model: ModelConfig;
  readonly deployment: ResolvedDeployment;
  /** Model name to send upstream. */
  readonly upstreamModel: string;
  /** The model's other deployments, in config order (failover candidates). */
  readonly failover: readonly ResolvedDeployment[];
}

/** The model name a deployment is sent: its `upstream_model`, else the public name. */
export function upstreamModelOf(model: ModelConfig, deployment: ResolvedDeployment): string {
  return deployment.upstream_model ?? model.name;
}

/**
 * Resolves a model name for a provider's endpoint.
 * @throws GatewayError `model_not_found` (404) for an unknown model, `wrong_endpoint` (400) when the
 * model's deployment speaks the other provider's API.
 */
export function routeModel(ctx: GatewayContext, name: string, provider: 'openai' | 'anthropic'): Route {
  const model = ctx.config.models.get(name);
  if (model === undefined) {
    throw new GatewayError('model_not_found', `The model "${name}" does not exist on this gateway. GET /v1/models lists the models you can use.`, 'model');
  }
  const all = model.deployments.map((n) => ctx.config.deployments.get(n)).filter((d): d is ResolvedDeployment => d !== undefined);
  const deployment = preferred(ctx, all, provider);
  if (deployment === undefined) {
    const first = all[0];
    if (first === undefined) throw new Error(`model ${name} has no deployment`);
    const endpoint = first.provider === 'anthropic' ? 'POST /v1/messages' : 'POST /v1/chat/completions';
    throw new GatewayError('wrong_endpoint', `The model "${name}" is served by an ${first.provider} deployment; call it with ${endpoint}.`, 'model');
  }
  return { model, deployment, upstreamModel: upstreamModelOf(model, deployment), failover: all.filter((d) => d !== deployment) };
}

/**
 * The deployment a request starts on: of the model's deployments that speak the endpoint's wire
 * format, the one with the most headroom — the smallest fraction left of its quota's buckets, as
 * this node sees the cluster-wide cap (a deployment without a quota counts as full) — the first in
 * config order on a tie; when that one is slow (`soft_ttft`), its `soft_share` of requests go to the
 * best one that is not. Undefined when none speaks the format.
 */
function preferred(ctx: GatewayContext, deployments: readonly ResolvedDeployment[], provider: 'openai' | 'anthropic'): ResolvedDeployment | undefined {
  let best: ResolvedDeployment | undefined;
  let bestHeadroom = -Infinity;
  // The best deployment that is not slow: where a share of a slow best one's requests go.
  let healthy: ResolvedDeployment | undefined;
  let healthyHeadroom = -Infinity;
  for (const d of deployments) {
    if (d.provider !== provider) continue;
    if (deployments.length === 1) return d;
    const h = headroom(ctx, d);
    if (h > bestHeadroom) {
      best = d;
      bestHeadroom = h;
    }
    if (h > healthyHeadroom && !ctx.health.isSlow(d)) {
      healthy = d;
      healthyHeadroom = h;
    }
  }
  if (best !== undefined && healthy !== undefined && healthy !== best && ctx.health.shouldMove(best)) return healthy;
  return best;
}

/** Fraction (0..1) left of a deployment's quota: its fullest-used bucket's level ÷ capacity; 1 without a quota. */
function headroom(ctx: GatewayContext, deployment: ResolvedDeployment): number {
  const quotas = ctx.quotas;
  if (quotas === undefined || !quotas.limited.has(deployment.name)) return 1;
  let h = 1;
  for (const b of quotas.leases.buckets(deployment.name)) h = Math.min(h, b.capacity > 0 ? Math.max(0, b.level) / b.capacity : 0);
  return h;
}

/** How a request's prompt is counted: the tenant's estimator overrides the model's. */
export function countingOf(tenant: TenantConfig, model: ModelConfig): { encoding: EncodingName | null; mode: 'estimate' | 'exact' } {
  const encoding = model.encoding === 'none' ? null : model.encoding;
  const mode = encoding === null ? 'estimate' : (tenant.estimator ?? model.estimator);
  return { encoding, mode };
}

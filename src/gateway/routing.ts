/**
 * Model → deployment routing and the counting mode of a request: the deployment of the endpoint's
 * format with the most quota headroom serves it, the others (in config order) take over on a hard
 * failure (see `runExchange`).
 */
import type { ResolvedDeployment } from '../config/load.ts';
import type { ModelConfig, TenantConfig } from '../config/schema.ts';
import { GatewayError } from '../errors.ts';
import { servesFormat, wireFormatOf } from '../providers/wire-format.ts';
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
  const deployment = preferred(ctx, model, all, provider);
  if (deployment === undefined) {
    const first = all[0];
    if (first === undefined) throw new Error(`model ${name} has no deployment`);
    const endpoint = wireFormatOf(first.provider) === 'anthropic' ? 'POST /v1/messages' : 'POST /v1/chat/completions';
    throw new GatewayError('wrong_endpoint', `The model "${name}" is served by an ${first.provider} deployment; call it with ${endpoint}.`, 'model');
  }
  return { model, deployment, upstreamModel: upstreamModelOf(model, deployment), failover: all.filter((d) => d !== deployment) };
}

/**
 * The deployment a request starts on: of the model's deployments that speak the endpoint's wire
 * format (a Bedrock deployment speaks both), the one with the most headroom — the smallest fraction left of its quota's buckets, as
 * this node sees the cluster-wide cap (a deployment without a quota counts as full) — the first in
 * config order on a tie; when that one is slow (`soft_ttft`), its `soft_share` of requests go to the
 * best one that is not. Deployments down after a hard failure are left out; when all of the format
 * are, the first of the other format that is up. Undefined when none speaks the format.
 */
function preferred(ctx: GatewayContext, model: ModelConfig, deployments: readonly ResolvedDeployment[], provider: 'openai' | 'anthropic'): ResolvedDeployment | undefined {
  // A Bedrock deployment serves both formats (always translated).
  const ofFormat = deployments.filter((d) => servesFormat(d.provider, provider));
  if (ofFormat.length === 0) return undefined;
  // A deployment that just failed hard is not started on while another of the format is up; when
  // every one of the format is down, one of the other format that is up starts (translated).
  const up = ofFormat.filter((d) => !ctx.health.isDown(d));
  if (up.length === 0) return deployments.find((d) => wireFormatOf(d.provider) !== provider && !ctx.health.isDown(d)) ?? ofFormat[0];
  if (ofFormat.length === 1) return ofFormat[0];
  const candidates = up;
  if (model.weights !== undefined) {
    const withRoom = candidates.filter((d) => headroom(ctx, d) > 0);
    const chosen = weighted(model, deployments, withRoom.length > 0 ? withRoom : candidates);
    if (chosen !== undefined) return moveIfSlow(ctx, chosen, candidates);
  }
  let best: ResolvedDeployment | undefined;
  let bestHeadroom = -Infinity;
  for (const d of candidates) {
    const h = headroom(ctx, d);
    if (h > bestHeadroom) {
      best = d;
      bestHeadroom = h;
    }
  }
  return best === undefined ? undefined : moveIfSlow(ctx, best, candidates);
}

/** `chosen`, or — when it is slow and this request falls in its `soft_share` — the candidate with the most headroom that is not slow. */
function moveIfSlow(ctx: GatewayContext, chosen: ResolvedDeployment, candidates: readonly ResolvedDeployment[]): ResolvedDeployment {
  let healthy: ResolvedDeployment | undefined;
  let healthyHeadroom = -Infinity;
  for (const d of candidates) {
    if (d === chosen || ctx.health.isSlow(d)) continue;
    const h = headroom(ctx, d);
    if (h > healthyHeadroom) {
      healthy = d;
      healthyHeadroom = h;
    }
  }
  return healthy !== undefined && ctx.health.shouldMove(chosen) ? healthy : chosen;
}

/** Smooth weighted round-robin state per model (nginx's): each deployment's running score. */
const scores = new WeakMap<ModelConfig, number[]>();

/**
 * `weights`: the next of `candidates` (the caller leaves out deployments that are down or whose
 * quota is spent, unless all are) by smooth weighted round-robin: weights 3 and 1 give a, a, b, a.
 * Undefined when no candidate has a weight above 0 (weight 0: failover only; then headroom decides).
 */
function weighted(model: ModelConfig, deployments: readonly ResolvedDeployment[], candidates: readonly ResolvedDeployment[]): ResolvedDeployment | undefined {
  const weights = model.weights ?? [];
  let score = scores.get(model);
  if (score === undefined) scores.set(model, (score = deployments.map(() => 0)));
  let total = 0;
  let pick = -1;
  for (let i = 0; i < deployments.length; i++) {
    const w = weights[i] ?? 0;
    if (w <= 0 || !candidates.includes(deployments[i] as ResolvedDeployment)) continue;
    total += w;
    score[i] = (score[i] ?? 0) + w;
    if (pick < 0 || (score[i] as number) > (score[pick] as number)) pick = i;
  }
  if (pick < 0) return undefined;
  score[pick] = (score[pick] as number) - total;
  return deployments[pick];
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

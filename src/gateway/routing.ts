/**
 * Model → deployment routing and the counting mode of a request: a model's first deployment serves
 * it, the others (in config order) take over on a hard failure (see `runExchange`).
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
  /** The model's other deployments, in config order. */
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
  const deployment = ctx.config.deployments.get(model.deployments[0] ?? '');
  if (deployment === undefined) throw new Error(`model ${name} has no deployment`);
  if (deployment.provider !== provider) {
    const endpoint = deployment.provider === 'anthropic' ? 'POST /v1/messages' : 'POST /v1/chat/completions';
    throw new GatewayError('wrong_endpoint', `The model "${name}" is served by an ${deployment.provider} deployment; call it with ${endpoint}.`, 'model');
  }
  const failover = model.deployments.slice(1).map((n) => ctx.config.deployments.get(n)).filter((d): d is ResolvedDeployment => d !== undefined);
  return { model, deployment, upstreamModel: upstreamModelOf(model, deployment), failover };
}

/** How a request's prompt is counted: the tenant's estimator overrides the model's. */
export function countingOf(tenant: TenantConfig, model: ModelConfig): { encoding: EncodingName | null; mode: 'estimate' | 'exact' } {
  const encoding = model.encoding === 'none' ? null : model.encoding;
  const mode = encoding === null ? 'estimate' : (tenant.estimator ?? model.estimator);
  return { encoding, mode };
}

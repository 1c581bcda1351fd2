/**
 * Changes of a budget's spend at runtime, applied on the tenant's owner: to its limiter state, so the
 * change is checkpointed, handed over and saved like any usage. Reached from the node's admin API
 * (`POST /admin/v1/tenants/:tenant/spend`) and from a router's (which forwards to the owner over
 * `POST /_quotaring/v1/tenants/:tenant/spend`, signed with the cluster secret; see
 * `src/gateway/cluster-auth.ts`). Every change is logged at info.
 */
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Clock } from '../clock.ts';
import type { LoadedConfig } from '../config/load.ts';
import type { Handoff } from '../coord/handoff/handoff.ts';
import type { Limiter } from '../limiter/limiter.ts';
import { adminError } from '../ops/admin-server.ts';
import { ForwardedSpendSchema, resolveSpendChange, spendChanged } from '../ops/spend-admin.ts';
import type { SpendAnswer, SpendRequester } from '../ops/spend-admin.ts';

/** What a node applies spend changes with. */
export interface SpendDeps {
  readonly config: LoadedConfig;
  readonly limiter: Limiter;
  /** Absent on a single node (which owns every tenant). */
  readonly handoff: Handoff | undefined;
  node(): string;
  readonly clock: Clock;
  readonly log: FastifyBaseLogger;
}

function notOwner(tenant: string, owner: string | null): SpendAnswer {
  const message = `This node does not decide for tenant ${tenant}${owner === null ? '' : `: its owner is ${owner}`}. Change its spend through a router's admin API${owner === null ? '' : ' or the owner\'s'}.`;
  return { status: 409, body: { ...adminError(message, 'not_owner'), owner } };
}

/**
 * Applies spend change `body` (see `SpendBodySchema`) to `tenant` when this node owns it (after its
 * state is loaded), marks the tenant for the next checkpoint, and logs the change. Changes nothing on
 * a refusal: 400/404 for the body (see `resolveSpendChange`), 409 `not_owner` when another node owns
 * the tenant (or this one only stands in for it).
 */
export async function changeTenantSpend(d: SpendDeps, tenant: string, body: unknown, who: SpendRequester): Promise<SpendAnswer> {
  const resolved = resolveSpendChange(d.config, tenant, body);
  if (!resolved.ok) return { status: resolved.problem.status, body: adminError(resolved.problem.message, resolved.problem.code) };
  const c = resolved.value;
  const placed = d.handoff?.place(tenant);
  if (placed !== undefined && !placed.here) return notOwner(tenant, placed.owner?.id ?? null);
  await d.handoff?.ready(tenant);
  // The ring may have moved while the state loaded.
  const again = d.handoff?.place(tenant);
  if (again !== undefined && !again.here) return notOwner(tenant, again.owner?.id ?? null);
  let applied: ReturnType<Limiter['changeSpend']>;
  try {
    applied = d.limiter.changeSpend(tenant, c.name, c.change);
  } catch (err) {
    // The config has the budget but the limiter's policy does not (a spread tenant keeps only its concurrency limits here).
    return { status: 409, body: adminError(`The budget ${c.name} of tenant ${tenant} is not kept on this node now: ${(err as Error).message}.`, 'not_owner') };
  }
  d.handoff?.touched(tenant);
  const answer = spendChanged(tenant, d.node(), c, applied.beforePico, applied.after, d.clock.now());
  d.log.info(
    { tenant, key: answer.key, limit: answer.limit, op: answer.op, amountUsd: answer.amountUsd, spentBefore: answer.spentBefore, spentAfter: answer.spentAfter, admin: who.remote, ...(who.via === undefined ? {} : { via: who.via }) },
    'budget spend changed',
  );
  return { status: 200, body: answer };
}

/**
 * Registers `POST /_quotaring/v1/tenants/:tenant/spend` (signed calls only, checked by the cluster-auth
 * hook): body `ForwardedSpend`; answers as {@link changeTenantSpend} (errors also carry
 * `x-quotaring-error`), 400 for a body that is not a forwarded change.
 */
export function tenantSpendRoutes(app: FastifyInstance, deps: SpendDeps): void {
  app.post<{ Params: { tenant: string } }>('/_quotaring/v1/tenants/:tenant/spend', async (request, reply) => {
    const parsed = ForwardedSpendSchema.safeParse(request.body);
    if (!parsed.success) {
      return reply.code(400).header('x-quotaring-error', 'invalid_request').send(adminError(`Not a forwarded spend change: ${parsed.error.issues[0]?.message ?? 'invalid'}.`, 'invalid_request'));
    }
    const answer = await changeTenantSpend(deps, request.params.tenant, parsed.data.change, parsed.data.admin);
    if (answer.status !== 200) reply.header('x-quotaring-error', answer.body.error.code);
    return reply.code(answer.status).send(answer.body);
  });
}

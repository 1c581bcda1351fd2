/**
 * The catalogue's admin routes, on every router's and node's admin listener (behind its bearer
 * token). Every process writes to the shared catalogue store, so a change made through any router
 * reaches every router and node (within the catalogue's poll period; at once with notifications).
 *
 * | route | what |
 * |---|---|
 * | `GET /admin/v1/catalogue` | store, reachable, version, counts |
 * | `GET /admin/v1/catalogue/tenants?after=&limit=&plan=&label=name:value&prefix=` | a page of tenants, id order |
 * | `POST /admin/v1/catalogue/tenants` | create (`issue_key: true` also issues its first key) |
 * | `GET · PATCH · DELETE /admin/v1/catalogue/tenants/:id` | read, change fields, delete (revokes its keys) |
 * | `POST /admin/v1/catalogue/tenants/:id/keys` | issue a key (the secret is in this answer only) |
 * | `DELETE /admin/v1/catalogue/keys/:id` | revoke a key by its public id |
 * | `POST /admin/v1/catalogue/keys/:id/rotate` | a new key, the old one revoked, in one write |
 * | `GET /admin/v1/catalogue/plans`, `PUT · DELETE /admin/v1/catalogue/plans/:name` | plans |
 * | `POST /admin/v1/catalogue/import` (NDJSON), `GET /admin/v1/catalogue/export` (NDJSON) | bulk |
 * | `GET /admin/v1/catalogue/audit?before=&limit=` | who changed what, newest first |
 *
 * Who made a change is the `x-quotaring-actor` header (1-128 printable characters; `admin` when
 * absent): recorded with the change in the store's audit log and in the process's log line. It is
 * declared by the caller, who holds the admin token: it names, it does not authenticate.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { CatalogueAdmin } from '../catalogue/admin.ts';
import type { AdminAnswer } from '../catalogue/answers.ts';
import { adminError } from './admin-server.ts';

/** Header naming who makes a change. */
export const ACTOR_HEADER = 'x-quotaring-actor';
/** Largest import body, bytes. */
export const IMPORT_BODY_LIMIT = 32 * 1024 * 1024;

function actorOf(request: FastifyRequest): string | undefined {
  const v = request.headers[ACTOR_HEADER];
  if (v === undefined) return 'admin';
  if (typeof v !== 'string' || !/^[\x20-\x7e]{1,128}$/.test(v)) return undefined;
  return v.trim() === '' ? undefined : v.trim();
}

function send(reply: FastifyReply, a: AdminAnswer): FastifyReply {
  return reply.code(a.status).send(a.body);
}

/** Registers the catalogue routes on an admin server. */
export function catalogueRoutes(admin: FastifyInstance, catalogue: CatalogueAdmin): void {
  admin.addContentTypeParser(['application/x-ndjson', 'application/ndjson', 'text/plain'], { parseAs: 'string', bodyLimit: IMPORT_BODY_LIMIT }, (_req, body, done) => done(null, body));
  const change = (fn: (request: FastifyRequest, actor: string) => Promise<AdminAnswer>) => async (request: FastifyRequest, reply: FastifyReply) => {
    const actor = actorOf(request);
    if (actor === undefined) return reply.code(400).send(adminError(`${ACTOR_HEADER}: 1-128 printable ASCII characters`, 'invalid_field'));
    const answer = await fn(request, actor);
    if (answer.status < 300) request.log.info({ actor, op: `${request.method} ${request.routeOptions.url ?? ''}`, params: request.params }, 'catalogue change');
    return send(reply, answer);
  };
  type Id = { Params: { id: string } };
  const id = (r: FastifyRequest): string => (r.params as { id: string }).id;

  admin.get('/admin/v1/catalogue', async () => catalogue.status());
  admin.get<{ Querystring: Record<string, string | undefined> }>('/admin/v1/catalogue/tenants', async (request, reply) => {
    const q = request.query;
    const limit = q.limit === undefined ? undefined : Number(q.limit);
    return send(reply, await catalogue.listTenants({ ...(q.after === undefined ? {} : { after: q.after }), ...(limit === undefined ? {} : { limit }), ...(q.plan === undefined ? {} : { plan: q.plan }), ...(q.label === undefined ? {} : { label: q.label }), ...(q.prefix === undefined ? {} : { prefix: q.prefix }) }));
  });
  admin.post('/admin/v1/catalogue/tenants', change((r, actor) => catalogue.createTenant(r.body, actor)));
  admin.get<Id>('/admin/v1/catalogue/tenants/:id', async (request, reply) => send(reply, catalogue.getTenant(request.params.id)));
  admin.patch<Id>('/admin/v1/catalogue/tenants/:id', change((r, actor) => catalogue.updateTenant(id(r), r.body, actor)));
  admin.delete<Id>('/admin/v1/catalogue/tenants/:id', change((r, actor) => catalogue.deleteTenant(id(r), actor)));
  admin.post<Id>('/admin/v1/catalogue/tenants/:id/keys', change((r, actor) => catalogue.issue(id(r), r.body, actor)));
  admin.delete<Id>('/admin/v1/catalogue/keys/:id', change((r, actor) => catalogue.revoke(id(r), actor)));
  admin.post<Id>('/admin/v1/catalogue/keys/:id/rotate', change((r, actor) => catalogue.rotate(id(r), actor)));
  admin.get('/admin/v1/catalogue/plans', async (_request, reply) => send(reply, catalogue.listPlans()));
  admin.put<Id>('/admin/v1/catalogue/plans/:id', change((r, actor) => catalogue.putPlan(id(r), r.body, actor)));
  admin.delete<Id>('/admin/v1/catalogue/plans/:id', change((r, actor) => catalogue.deletePlan(id(r), actor)));
  admin.post('/admin/v1/catalogue/import', { bodyLimit: IMPORT_BODY_LIMIT }, change((r, actor) => (typeof r.body === 'string' && !/^\s*application\/([\w.-]+\+)?json\s*(;|$)/i.test(r.headers['content-type'] ?? '') ? catalogue.importLines(r.body, actor) : Promise.resolve({ status: 415, body: adminError('Send the import as NDJSON (Content-Type: application/x-ndjson), one plan or tenant a line.', 'unsupported_media_type') }))));
  admin.get('/admin/v1/catalogue/export', async (_request, reply) => {
    let out = '';
    for (const line of catalogue.exportLines()) out += `${line}\n`;
    return reply.header('content-type', 'application/x-ndjson').send(out);
  });
  admin.get<{ Querystring: { before?: string; limit?: string } }>('/admin/v1/catalogue/audit', async (request, reply) => {
    const before = request.query.before === undefined ? undefined : Number(request.query.before);
    const limit = request.query.limit === undefined ? 100 : Number(request.query.limit);
    if ((before !== undefined && !Number.isSafeInteger(before)) || !Number.isSafeInteger(limit)) return reply.code(400).send(adminError('before and limit: integers', 'invalid_field'));
    return send(reply, await catalogue.audit(before, limit));
  });
}

/**
 * `quotaring tenants …`, `quotaring keys …` and `quotaring plans …`: the catalogue's admin API
 * (`src/ops/catalogue-routes.ts`) from the command line, through any router's (or node's) admin
 * listener. Prints the API's JSON answer; exits 1 with its error message on a refusal.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { parseDocument } from 'yaml';
import { request } from 'undici';

interface Target {
  readonly url: string;
  readonly tokenEnv: string;
  readonly actor?: string;
}

function withTarget(c: Command): Command {
  return c
    .option('--url <url>', 'admin URL of a router or node (admin.router_port / admin.port)', 'http://127.0.0.1:9200')
    .option('--token-env <name>', 'environment variable holding the admin token', 'QUOTARING_ADMIN_TOKEN')
    .option('--actor <name>', 'who makes the change, for the audit log (default: $USER)');
}

/** Calls the admin API; prints the answer; exits 1 on an error status. */
async function call(t: Target, method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE', path: string, body?: unknown, ndjson = false): Promise<unknown> {
  const token = process.env[t.tokenEnv];
  if (token === undefined || token === '') {
    process.stderr.write(`error: ${t.tokenEnv} is not set: export the admin token in it (npm start prints it), or name another variable with --token-env\n`);
    process.exit(1);
  }
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, 'x-quotaring-actor': t.actor ?? process.env.USER ?? 'cli' };
  let payload: string | undefined;
  if (body !== undefined) {
    headers['content-type'] = ndjson ? 'application/x-ndjson' : 'application/json';
    payload = typeof body === 'string' ? body : JSON.stringify(body);
  }
  let res;
  try {
    res = await request(new URL(path, t.url), { method, headers, ...(payload === undefined ? {} : { body: payload }) });
  } catch (err) {
    process.stderr.write(`error: ${t.url} does not answer (${(err as Error).message}): is a router running with its admin API (admin.token_env set)?\n`);
    process.exit(1);
  }
  const text = await res.body.text();
  if (res.statusCode >= 400) {
    let message = text;
    try {
      message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? text;
    } catch {
      /* not JSON: print as is */
    }
    process.stderr.write(`error: ${res.statusCode}: ${message}\n`);
    process.exit(1);
  }
  const type = String(res.headers['content-type'] ?? '');
  if (type.includes('ndjson')) {
    process.stdout.write(text);
    return text;
  }
  const value: unknown = text === '' ? {} : JSON.parse(text);
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  return value;
}

function json(what: string, text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    process.stderr.write(`error: ${what}: not JSON (e.g. '[{"requests":100,"window":"1m"}]')\n`);
    process.exit(1);
  }
}

function labels(list: readonly string[] | undefined): Record<string, string> | undefined {
  if (list === undefined || list.length === 0) return undefined;
  return Object.fromEntries(list.map((l) => [l.split('=')[0] ?? '', l.split('=').slice(1).join('=')]));
}

const collect = (v: string, prev: string[] = []): string[] => [...prev, v];

/**
 * NDJSON lines of the tenants and plans of a YAML config file, for `POST /admin/v1/catalogue/import`
 * (a migration from the YAML list; keys given by `env` are read from the environment).
 */
export function linesFromConfig(file: string, env: NodeJS.ProcessEnv = process.env): string {
  const raw = parseDocument(readFileSync(file, 'utf8')).toJS() as { tenants?: Record<string, unknown>[]; plans?: Record<string, unknown>[] };
  const out: string[] = [];
  for (const p of raw.plans ?? []) out.push(JSON.stringify({ kind: 'plan', ...p }));
  for (const t of raw.tenants ?? []) {
    const keys = ((t.keys as unknown[] | undefined) ?? []).map((k) => {
      if (typeof k === 'string' || typeof k !== 'object' || k === null) return k;
      const { env: name, ...rest } = k as Record<string, unknown>;
      return name === undefined ? rest : { ...rest, key: env[String(name)] ?? '' };
    });
    out.push(JSON.stringify({ kind: 'tenant', ...t, keys }));
  }
  return out.join('\n') + '\n';
}

/** Adds `tenants`, `keys` and `plans` to the CLI. */
export function addCatalogueCommands(program: Command): void {
  const tenants = program.command('tenants').description('tenants of the catalogue (catalogue.store: file or postgres), through a router\'s admin API');
  withTarget(tenants.command('add <id>').description('create a tenant and print its first key (shown once)'))
    .option('--plan <name>', 'its plan')
    .option('--limits <json>', 'its own limits, JSON (override the plan\'s of the same name)')
    .option('--priority <tier>', 'default tier')
    .option('--label <name=value>', 'a label (repeat)', collect)
    .option('--metrics', 'export its levels as metrics')
    .option('--no-key', 'issue no key')
    .action(async (id: string, o: Target & { plan?: string; limits?: string; priority?: string; label?: string[]; metrics?: boolean; key: boolean }) => {
      const l = labels(o.label);
      await call(o, 'POST', '/admin/v1/catalogue/tenants', { id, ...(o.plan === undefined ? {} : { plan: o.plan }), ...(o.limits === undefined ? {} : { limits: json('--limits', o.limits) }), ...(o.priority === undefined ? {} : { priority: o.priority }), ...(l === undefined ? {} : { labels: l }), ...(o.metrics === true ? { metrics: true } : {}), issue_key: o.key });
    });
  withTarget(tenants.command('list').description('list tenants, in id order'))
    .option('--plan <name>')
    .option('--prefix <text>')
    .option('--label <name:value>')
    .option('--limit <n>', 'tenants per page (1-1000)', '100')
    .option('--after <id>', 'the page after this id')
    .action(async (o: Target & { plan?: string; prefix?: string; label?: string; limit: string; after?: string }) => {
      const q = new URLSearchParams({ limit: o.limit, ...(o.plan === undefined ? {} : { plan: o.plan }), ...(o.prefix === undefined ? {} : { prefix: o.prefix }), ...(o.label === undefined ? {} : { label: o.label }), ...(o.after === undefined ? {} : { after: o.after }) });
      await call(o, 'GET', `/admin/v1/catalogue/tenants?${q.toString()}`);
    });
  withTarget(tenants.command('show <id>').description('a tenant, its limits in force and its keys (ids only)')).action(async (id: string, o: Target) => {
    await call(o, 'GET', `/admin/v1/catalogue/tenants/${encodeURIComponent(id)}`);
  });
  withTarget(tenants.command('set <id>').description('change a tenant\'s fields; usage already counted is kept'))
    .option('--plan <name>')
    .option('--limits <json>', 'its own limits, JSON ([] removes them)')
    .option('--priority <tier>')
    .option('--doc <json>', 'any fields, JSON (null removes one)')
    .action(async (id: string, o: Target & { plan?: string; limits?: string; priority?: string; doc?: string }) => {
      const patch = { ...((json('--doc', o.doc) as object | undefined) ?? {}), ...(o.plan === undefined ? {} : { plan: o.plan }), ...(o.limits === undefined ? {} : { limits: json('--limits', o.limits) }), ...(o.priority === undefined ? {} : { priority: o.priority }) };
      await call(o, 'PATCH', `/admin/v1/catalogue/tenants/${encodeURIComponent(id)}`, patch);
    });
  withTarget(tenants.command('rm <id>').description('delete a tenant and revoke its keys')).action(async (id: string, o: Target) => {
    await call(o, 'DELETE', `/admin/v1/catalogue/tenants/${encodeURIComponent(id)}`);
  });
  withTarget(tenants.command('import [file]').description('import NDJSON (a file, or - for stdin), or with --from-config the tenants of a YAML config'))
    .option('--from-config <file>', 'the tenants and plans lists of this config file')
    .action(async (file: string | undefined, o: Target & { fromConfig?: string }) => {
      const text = o.fromConfig !== undefined ? linesFromConfig(o.fromConfig) : readFileSync(file === undefined || file === '-' ? 0 : file, 'utf8');
      await call(o, 'POST', '/admin/v1/catalogue/import', text, true);
    });
  withTarget(tenants.command('export').description('every catalogue plan and tenant as NDJSON (keys as hashes)')).action(async (o: Target) => {
    await call(o, 'GET', '/admin/v1/catalogue/export');
  });
  withTarget(tenants.command('audit').description('who changed what, newest first'))
    .option('--limit <n>', 'entries', '50')
    .action(async (o: Target & { limit: string }) => {
      await call(o, 'GET', `/admin/v1/catalogue/audit?limit=${encodeURIComponent(o.limit)}`);
    });

  const keys = program.command('keys').description('API keys of catalogue tenants');
  withTarget(keys.command('issue <tenant>').description('issue a key (printed once; only its hash is kept)'))
    .option('--name <name>', 'a name for the key')
    .option('--limits <json>', 'the key\'s own limits, JSON')
    .action(async (tenant: string, o: Target & { name?: string; limits?: string }) => {
      await call(o, 'POST', `/admin/v1/catalogue/tenants/${encodeURIComponent(tenant)}/keys`, { ...(o.name === undefined ? {} : { name: o.name }), ...(o.limits === undefined ? {} : { limits: json('--limits', o.limits) }) });
    });
  withTarget(keys.command('revoke <id>').description('revoke a key by its public id (qr_<id>_…)')).action(async (id: string, o: Target) => {
    await call(o, 'DELETE', `/admin/v1/catalogue/keys/${encodeURIComponent(id)}`);
  });
  withTarget(keys.command('rotate <id>').description('a new key in place of this one (revoked at once)')).action(async (id: string, o: Target) => {
    await call(o, 'POST', `/admin/v1/catalogue/keys/${encodeURIComponent(id)}/rotate`);
  });

  const plans = program.command('plans').description('plans: named sets of limits tenants reference');
  withTarget(plans.command('list')).action(async (o: Target) => {
    await call(o, 'GET', '/admin/v1/catalogue/plans');
  });
  withTarget(plans.command('set <name>').description('create or replace a plan'))
    .requiredOption('--limits <json>', 'its limits, JSON')
    .option('--priority <tier>')
    .action(async (name: string, o: Target & { limits: string; priority?: string }) => {
      await call(o, 'PUT', `/admin/v1/catalogue/plans/${encodeURIComponent(name)}`, { limits: json('--limits', o.limits), ...(o.priority === undefined ? {} : { priority: o.priority }) });
    });
  withTarget(plans.command('rm <name>')).action(async (name: string, o: Target) => {
    await call(o, 'DELETE', `/admin/v1/catalogue/plans/${encodeURIComponent(name)}`);
  });
}

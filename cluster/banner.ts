/**
 * The text `quotaring up` prints once every child is ready: where to send requests, what runs where,
 * how the ring is formed, the demo keys, and one curl example per wire format.
 */
import type { DemoTenant } from './demo.ts';
import { redactUrl } from '../src/config/redis-url.ts';

/** What the banner describes. */
export interface BannerInfo {
  /** Router base URLs; the first one is used in the examples. */
  readonly routers: readonly string[];
  /** Nodes as `{ id, url, pid }`. */
  readonly nodes: readonly { readonly id: string; readonly url: string; readonly pid?: number }[];
  /** Redis URL of the membership, or undefined for static members. */
  readonly redis?: string;
  /** The simulator's URL; absent when none was started (every deployment of the config is a real provider). */
  readonly simulator?: string;
  /** The config file the user gave (or `cluster/demo.yaml`). */
  readonly configSource: string;
  /** Tenants with their keys (the demo's), or undefined when the keys are the user's own (not printed). */
  readonly tenants?: readonly DemoTenant[];
  /** Admin APIs: token and its variable, routers' and nodes' admin URLs. */
  readonly admin?: { readonly token: string; readonly tokenEnv: string; readonly routers: readonly string[]; readonly nodes: readonly string[] };
  /** Model names for the examples; an example is left out when its model is undefined. */
  readonly models: { readonly openai?: string; readonly anthropic?: string };
  /**
   * The deployments of a config the user gave (absent for the demo, whose deployments are the
   * simulator): where each one sends requests, and the variable its key is read from.
   */
  readonly upstreams?: readonly { readonly name: string; readonly baseUrl: string; readonly keyEnv?: string }[];
  /** Process ids: `up` itself, the simulator, the first router. */
  readonly pids?: { readonly up?: number; readonly simulator?: number; readonly router?: number };
  /** `server.log_level` of the children (`info` and below print a line per request). */
  readonly logLevel?: string;
  /** `quotaring reload` reaches this up (its pid file was written). */
  readonly reload?: boolean;
}

/** First line of the banner; the end-to-end test waits for it. */
export const BANNER_HEADLINE = 'quotaring cluster is up';

/** The banner, ending with a newline. Pure: no I/O. */
export function clusterBanner(info: BannerInfo): string {
  const base = info.routers[0] ?? '';
  const key = info.tenants?.[0]?.key ?? '<tenant key>';
  const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
  const ring =
    info.redis === undefined
      ? 'static members (no Redis): every router and node builds the same ring from this list; routers health-check the nodes'
      : `Redis membership at ${redactUrl(info.redis)}: nodes heartbeat, routers and nodes build the ring from the live set`;
  const pidOf = (pid: number | undefined): string => (pid === undefined ? '' : `   pid ${pid}`);
  const upstreams = info.upstreams;
  const simulator = info.simulator;
  const provider =
    simulator === undefined
      ? 'your providers (no simulator started: the provider keys come from the variables below)'
      : upstreams === undefined
        ? 'the provider simulator (the demo\'s deployments: no provider key needed)'
        : upstreams.every((u) => u.baseUrl.startsWith(simulator))
          ? 'the provider simulator (your deployments point at it)'
          : 'the provider simulator (for the deployments that point at it; the others send to the URLs below)';
  const lines = [
    '',
    `${BANNER_HEADLINE}: ${plural(info.routers.length, 'router')}, ${plural(info.nodes.length, 'node')}, ${provider}`,
    '',
    `  routers    ${info.routers.join('  ')}   <- send requests here${pidOf(info.pids?.router)}`,
    ...info.nodes.map((n, i) => `  ${i === 0 ? 'nodes    ' : '         '}  ${n.id.padEnd(8)} ${n.url}${pidOf(n.pid)}`),
    `  ring       ${ring}`,
    ...(simulator === undefined ? [] : [`  simulator  ${simulator}${pidOf(info.pids?.simulator)}`]),
    ...(upstreams ?? []).map((u, i) => `  ${i === 0 ? 'upstream ' : '         '}  ${u.name}  ${u.baseUrl}${u.keyEnv === undefined ? '  (no key)' : `  (key from ${u.keyEnv})`}`),
    `  config     ${info.configSource}${info.reload === true ? `   edit it, then: npx quotaring reload${info.routers[0]?.endsWith(':8080') === true ? '' : ` --port ${new URL(info.routers[0] ?? 'http://x:8080').port}`} (or kill -HUP ${info.pids?.up ?? '<pid of up>'})` : ''}`,
    ...(info.logLevel === undefined
      ? []
      : [`  logs       ${['info', 'debug', 'trace'].includes(info.logLevel) ? `level ${info.logLevel}: a line per request` : `level ${info.logLevel}: no request lines (--logs for one per request)`}`]),
    '',
  ];
  if (info.admin !== undefined) {
    const a = info.admin;
    lines.push(
      `Operations (admin token: ${a.token}, in ${a.tokenEnv} of every process):`,
      `  dashboard  ${a.routers[0] ?? ''}/dashboard#token=${a.token}`,
      `  top        ${a.tokenEnv}=${a.token} npx quotaring top --url ${a.routers[0] ?? ''}`,
      `  tenants    ${a.tokenEnv}=${a.token} npx quotaring tenants add <id> --plan free --url ${a.routers[0] ?? ''}   (docs/tenants.md)`,
      `  admin API  routers ${a.routers.join('  ')}   nodes ${a.nodes.join('  ')}`,
      `             curl -s -H 'Authorization: Bearer ${a.token}' ${a.routers[0] ?? ''}/admin/v1/ring`,
      `  metrics    ${base}/metrics and each node's /metrics`,
      '',
    );
  }
  if (info.tenants === undefined) {
    lines.push(`Tenants and keys: as configured in ${info.configSource} (keys are not printed).`, '');
  } else {
    const idWidth = Math.max(...info.tenants.map((t) => t.id.length));
    const keyWidth = Math.max(...info.tenants.map((t) => t.key.length));
    lines.push('Demo tenants:');
    for (const t of info.tenants) lines.push(`  ${t.id.padEnd(idWidth)}  key ${t.key.padEnd(keyWidth)}  ${t.limits}`);
    lines.push('');
  }
  if (info.models.openai !== undefined) {
    lines.push(
      'OpenAI wire format (any OpenAI SDK: baseURL ' + `${base}/v1):`,
      `  curl -si ${base}/v1/chat/completions \\`,
      `    -H 'Authorization: Bearer ${key}' -H 'Content-Type: application/json' \\`,
      `    -d '{"model":"${info.models.openai}","max_tokens":50,"messages":[{"role":"user","content":"Hello"}]}'`,
      '',
    );
  }
  if (info.models.anthropic !== undefined) {
    lines.push(
      `Anthropic wire format (Anthropic SDK: baseURL ${base}):`,
      `  curl -si ${base}/v1/messages \\`,
      `    -H 'x-api-key: ${key}' -H 'anthropic-version: 2023-06-01' -H 'Content-Type: application/json' \\`,
      `    -d '{"model":"${info.models.anthropic}","max_tokens":50,"messages":[{"role":"user","content":"Hello"}]}'`,
      '',
    );
  }
  lines.push('Press Ctrl-C to stop every process.', '');
  return lines.join('\n');
}

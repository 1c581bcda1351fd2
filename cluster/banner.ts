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
  /** Nodes as `{ id, url }`. */
  readonly nodes: readonly { readonly id: string; readonly url: string }[];
  /** Redis URL of the membership, or undefined for static members. */
  readonly redis?: string;
  readonly simulator: string;
  /** The config file the user gave (or `cluster/demo.yaml`). */
  readonly configSource: string;
  /** Tenants with their keys (the demo's), or undefined when the keys are the user's own (not printed). */
  readonly tenants?: readonly DemoTenant[];
  /** Admin APIs: token and its variable, routers' and nodes' admin URLs. */
  readonly admin?: { readonly token: string; readonly tokenEnv: string; readonly routers: readonly string[]; readonly nodes: readonly string[] };
  /** Model names for the examples; an example is left out when its model is undefined. */
  readonly models: { readonly openai?: string; readonly anthropic?: string };
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
  const lines = [
    '',
    `${BANNER_HEADLINE}: ${plural(info.routers.length, 'router')}, ${plural(info.nodes.length, 'node')}, the provider simulator (no provider key needed)`,
    '',
    `  routers    ${info.routers.join('  ')}   <- send requests here`,
    ...info.nodes.map((n, i) => `  ${i === 0 ? 'nodes    ' : '         '}  ${n.id.padEnd(8)} ${n.url}`),
    `  ring       ${ring}`,
    `  simulator  ${info.simulator}`,
    `  config     ${info.configSource}`,
    '',
  ];
  if (info.admin !== undefined) {
    const a = info.admin;
    lines.push(
      `Operations (admin token: ${a.token}, in ${a.tokenEnv} of every process):`,
      `  dashboard  ${a.routers[0] ?? ''}/dashboard#token=${a.token}`,
      `  top        ${a.tokenEnv}=${a.token} npx quotaring top --url ${a.routers[0] ?? ''}`,
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

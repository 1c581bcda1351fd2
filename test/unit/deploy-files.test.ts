/**
 * The Docker deployment files, checked without a Docker engine (none on the machine this was written
 * on): docker-compose.yml parses and has the 8 services (redis, simulator, node1..node3, router,
 * prometheus, grafana); every relative host path it mounts exists in the repo; Prometheus scrapes
 * exactly the 3 node services and the router, all on port 8080, every 5 s; every metric name in a
 * dashboard PromQL expression is documented in docs/metrics.md (histogram series via their
 * _bucket/_sum/_count suffix), and each of the 31 quotaring_ metrics documented there is on at least
 * one panel; panels use the datasource uid that Grafana's provisioning defines; cluster/compose.yaml
 * loads with the project's loader, binds the admin listener on 0.0.0.0, and the router's admin port
 * is the one published on the host's 127.0.0.1; the admin token is required from the operator (no
 * default in compose) and the loader refuses a placeholder or short one on 0.0.0.0 (issue 14).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config/load.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const text = (rel: string): string => readFileSync(resolve(ROOT, rel), 'utf8');
const yamlFile = (rel: string): unknown => parse(text(rel), { merge: true });

interface Service {
  image?: string;
  command?: string[];
  volumes?: string[];
  ports?: string[];
  environment?: Record<string, string>;
}
const compose = yamlFile('docker-compose.yml') as { services: Record<string, Service> };
const services = compose.services;

interface Target {
  refId: string;
  expr: string;
  datasource: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  datasource?: { type: string; uid: string };
  targets?: Target[];
}
const dashboard = JSON.parse(text('deploy/grafana/dashboards/quotaring.json')) as { uid: string; schemaVersion: number; panels: Panel[] };
const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');

const PROMQL_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset']);

/** Metric names in a PromQL expression: identifiers outside label matchers, ranges and groupings that are not function calls or keywords. */
function metricNames(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names: string[] = [];
  for (const m of s.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    if (/^\s*\(/.test(s.slice(m.index + m[0].length)) || PROMQL_KEYWORDS.has(m[0])) continue;
    names.push(m[0]);
  }
  return names;
}

/** Metric names documented in docs/metrics.md, and the ones whose table type is histogram. */
function documented(): { names: Set<string>; histograms: Set<string> } {
  const doc = text('docs/metrics.md');
  const names = new Set<string>();
  const histograms = new Set<string>();
  for (const m of doc.matchAll(/`((?:quotaring|process|nodejs)_[a-z0-9_]+)`/g)) names.add(m[1] as string);
  for (const line of doc.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    if (cells[2] !== 'histogram') continue;
    for (const m of (cells[1] ?? '').matchAll(/`([a-z0-9_]+)`/g)) histograms.add(m[1] as string);
  }
  return { names, histograms };
}

describe('docker-compose.yml', () => {
  test('has the 8 services', () => {
    assert.deepEqual(Object.keys(services).sort(), ['grafana', 'node1', 'node2', 'node3', 'prometheus', 'redis', 'router', 'simulator']);
  });

  test('every relative host path mounted as a volume exists in the repo', () => {
    let mounts = 0;
    for (const [name, svc] of Object.entries(services)) {
      for (const volume of svc.volumes ?? []) {
        const host = volume.split(':')[0] as string;
        if (!host.startsWith('.')) continue;
        mounts++;
        assert.ok(existsSync(resolve(ROOT, host)), `${name}: ${host} does not exist`);
      }
    }
    // The simulator, 3 nodes and the router mount the config file, prometheus 1 file, grafana 2 directories.
    assert.equal(mounts, 8);
  });

  test('every quotaring container gets QUOTARING_ADMIN_TOKEN from the operator, required, with no default; the router publishes 9200 on 127.0.0.1 only', () => {
    for (const name of ['simulator', 'node1', 'node2', 'node3', 'router']) {
      // `${VAR:?message}`: compose refuses to start when it is unset or empty; no `:-default` secret.
      assert.match(services[name]?.environment?.QUOTARING_ADMIN_TOKEN ?? '', /^\$\{QUOTARING_ADMIN_TOKEN:\?[^}]+\}$/, name);
    }
    assert.doesNotMatch(text('docker-compose.yml'), /change-me|ADMIN_TOKEN:-/);
    assert.deepEqual(services.router?.ports, ['8080:8080', '127.0.0.1:9200:9200']);
    assert.deepEqual(services.prometheus?.ports, ['127.0.0.1:9091:9090']);
    assert.deepEqual(services.grafana?.ports, ['127.0.0.1:3000:3000']);
  });

  test('every node and router gets the cluster secret from the environment (required, never a literal)', () => {
    for (const name of ['node1', 'node2', 'node3', 'router']) {
      assert.match(services[name]?.environment?.QUOTARING_CLUSTER_SECRET ?? '', /^\$\{QUOTARING_CLUSTER_SECRET:\?[^}]+\}$/, name);
      assert.equal(services[name]?.environment?.QUOTARING_CLUSTER_SECRET_PREVIOUS, '${QUOTARING_CLUSTER_SECRET_PREVIOUS:-}', name);
    }
  });

  test('the header says it has not been run, and what checks it for real', () => {
    const header = text('docker-compose.yml').split('\nx-quotaring')[0] as string;
    assert.match(header, /Not run here: there is no Docker engine/);
    assert.match(header, /test\/e2e\/image\.test\.ts/);
    assert.match(text('test/e2e/image.test.ts'), /'--file', 'docker-compose\.yml', 'config'/);
  });
});

describe('prometheus.yml', () => {
  const prom = yamlFile('deploy/prometheus/prometheus.yml') as {
    global: { scrape_interval: string };
    scrape_configs: { job_name: string; scrape_interval: string; metrics_path: string; static_configs: { targets: string[] }[] }[];
  };

  test('is the file mounted at the path Prometheus is started with', () => {
    const configFlag = services.prometheus?.command?.find((c) => c.startsWith('--config.file='))?.slice('--config.file='.length);
    assert.ok(services.prometheus?.volumes?.includes(`./deploy/prometheus/prometheus.yml:${configFlag}:ro`));
  });

  test('scrapes the 3 nodes and the router by compose service name on 8080, every 5 s', () => {
    const targets: Record<string, string[]> = {};
    for (const job of prom.scrape_configs) {
      assert.equal(job.scrape_interval, '5s');
      assert.equal(job.metrics_path, '/metrics');
      targets[job.job_name] = job.static_configs.flatMap((c) => c.targets);
    }
    assert.equal(prom.global.scrape_interval, '5s');
    assert.deepEqual(targets, { 'quotaring-node': ['node1:8080', 'node2:8080', 'node3:8080'], 'quotaring-router': ['router:8080'] });
    for (const target of Object.values(targets).flat()) {
      const [host, port] = target.split(':');
      assert.ok(services[host as string], `${target}: no compose service ${host}`);
      assert.equal(port, '8080');
    }
  });
});

describe('Grafana provisioning and dashboard', () => {
  const ds = yamlFile('deploy/grafana/provisioning/datasources/prometheus.yaml') as { datasources: { uid: string; type: string; url: string }[] };
  const providers = yamlFile('deploy/grafana/provisioning/dashboards/quotaring.yaml') as { providers: { type: string; options: { path: string } }[] };

  test('the datasource is the prometheus service, and the dashboard directory is mounted where the provider reads', () => {
    assert.equal(ds.datasources.length, 1);
    assert.equal(ds.datasources[0]?.type, 'prometheus');
    assert.equal(ds.datasources[0]?.url, 'http://prometheus:9090');
    assert.ok(services.grafana?.volumes?.includes('./deploy/grafana/provisioning:/etc/grafana/provisioning:ro'));
    assert.ok(services.grafana?.volumes?.includes(`./deploy/grafana/dashboards:${providers.providers[0]?.options.path}:ro`));
    assert.equal(services.grafana?.environment?.GF_AUTH_ANONYMOUS_ENABLED, 'true');
    assert.equal(services.grafana?.environment?.GF_AUTH_ANONYMOUS_ORG_ROLE, 'Viewer');
  });

  test('panels and targets use the provisioned datasource uid', () => {
    const uid = ds.datasources[0]?.uid;
    assert.ok(uid);
    for (const panel of queryPanels) {
      assert.equal(panel.datasource?.uid, uid, panel.title);
      assert.ok((panel.targets ?? []).length > 0, `${panel.title}: no targets`);
      for (const t of panel.targets ?? []) assert.equal(t.datasource.uid, uid, `${panel.title} ${t.refId}`);
    }
  });

  test('is a schemaVersion 39 dashboard of timeseries/stat panels with unique ids and non-overlapping gridPos', () => {
    assert.equal(dashboard.schemaVersion, 39);
    assert.equal(new Set(dashboard.panels.map((p) => p.id)).size, dashboard.panels.length);
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      assert.ok(['row', 'timeseries', 'stat'].includes(p.type), `${p.title}: type ${p.type}`);
      const { h, w, x, y } = p.gridPos;
      assert.ok(x >= 0 && w > 0 && x + w <= 24 && h > 0 && y >= 0, `${p.title}: gridPos`);
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          assert.ok(!cells.has(`${i},${j}`), `${p.title} overlaps another panel at ${i},${j}`);
          cells.add(`${i},${j}`);
        }
      }
    }
  });

  test('metricNames extracts metrics only', () => {
    assert.deepEqual(metricNames('histogram_quantile(0.99, sum by (le, kind) (rate(x_bucket{result=~"a|b"}[$__rate_interval]))) / on (kind) y'), ['x_bucket', 'y']);
  });

  test('every dashboard metric is documented, and every documented quotaring_ metric is on a panel', () => {
    const { names, histograms } = documented();
    assert.deepEqual([...histograms].sort(), [
      'quotaring_acquire_wait_seconds',
      'quotaring_handoff_duration_seconds',
      'quotaring_router_request_duration_seconds',
      'quotaring_tokens_used_ratio',
    ]);
    const quotaring = [...names].filter((n) => n.startsWith('quotaring_'));
    assert.equal(quotaring.length, 36);

    const used = new Set<string>();
    for (const panel of queryPanels) {
      for (const t of panel.targets ?? []) {
        for (const name of metricNames(t.expr)) {
          const base = name.replace(/_(bucket|sum|count)$/, '');
          const ok = names.has(name) || (base !== name && histograms.has(base));
          assert.ok(ok, `${panel.title}: ${name} is not in docs/metrics.md`);
          used.add(histograms.has(base) ? base : name);
        }
      }
    }
    assert.deepEqual(quotaring.filter((n) => !used.has(n)), []);
  });

  test('the tenant-remaining panel shows one line per tenant and limit (only the owner exports it), not one per node', () => {
    const targets = queryPanels.flatMap((p) => (p.targets ?? []).filter((t) => metricNames(t.expr).includes('quotaring_tenant_remaining')));
    assert.deepEqual(
      targets.map((t) => t.expr),
      [
        'min by (tenant, limit) (quotaring_tenant_remaining)',
        '1 - min by (tenant, limit) (quotaring_tenant_remaining{limit=~"cost/.*"}) / max by (tenant, limit) (quotaring_tenant_limit{limit=~"cost/.*"})',
        '(max by (tenant, limit) (quotaring_tenant_limit{limit=~"cost/.*"}) - min by (tenant, limit) (quotaring_tenant_remaining{limit=~"cost/.*"})) / 1000000',
      ],
    );
  });

  test('the Spend row: spend rate from the counter (summed over the nodes that served), budgets from the owner\'s gauges (µ$ shown in USD)', () => {
    const row = dashboard.panels.findIndex((p) => p.type === 'row' && p.title === 'Spend (opted-in tenants)');
    const spend = dashboard.panels.slice(row + 1, row + 4) as (Panel & { fieldConfig: { defaults: { unit: string } } })[];
    assert.deepEqual(spend.map((p) => [p.title, p.fieldConfig.defaults.unit]), [
      ['Spend rate (USD/hour) by tenant', 'currencyUSD'],
      ['Budget used (share of each budget)', 'percentunit'],
      ['Budget spent vs limit (USD)', 'currencyUSD'],
    ]);
    const exprs = spend.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    for (const e of exprs.filter((x) => x.includes('quotaring_tenant_spend_usd_total'))) assert.match(e, /^sum by \(tenant(, key)?\) \(rate\(quotaring_tenant_spend_usd_total(\{key!=""\})?\[\$__rate_interval\]\)\) \* 3600$/);
    for (const e of exprs.filter((x) => x.includes('quotaring_tenant_limit'))) assert.doesNotMatch(e.replaceAll('max by (tenant, limit) (quotaring_tenant_limit{limit=~"cost/.*"})', ''), /quotaring_tenant_limit/);
  });
});

describe('cluster/compose.yaml', () => {
  test('loads with the project loader, admin on 0.0.0.0, router admin port published, demo tenants opted in to metrics', () => {
    process.env.QUOTARING_SIM_KEY = 'sim-demo-key';
    const { config } = loadConfig(resolve(ROOT, 'cluster/compose.yaml'));
    assert.equal(config.admin.host, '0.0.0.0');
    assert.equal(config.admin.token_env, 'QUOTARING_ADMIN_TOKEN');
    assert.ok(services.router?.ports?.includes(`127.0.0.1:${config.admin.router_port}:${config.admin.router_port}`));
    assert.deepEqual(config.tenants.map((t) => [t.id, t.metrics]), [['alice', true], ['bob', true]]);
  });

  test('its admin listeners (0.0.0.0) refuse the old default token and short ones; a token of the operator\'s loads', () => {
    const env = { QUOTARING_SIM_KEY: 'sim-demo-key' };
    const file = resolve(ROOT, 'cluster/compose.yaml');
    for (const token of ['change-me', 'short-token']) {
      assert.throws(() => loadConfig(file, { ...env, QUOTARING_ADMIN_TOKEN: token }), (err: Error) => /admin\.host: 0\.0\.0\.0 is not a loopback address/.test(err.message));
    }
    assert.equal(loadConfig(file, { ...env, QUOTARING_ADMIN_TOKEN: '3f9a0c1d7e2b4a6f8c0d1e2f3a4b5c6d' }).config.admin.host, '0.0.0.0');
    assert.equal(loadConfig(file, env).config.admin.host, '0.0.0.0', 'unset: the admin listeners stay off, the config loads');
  });
});

/**
 * The Helm chart `deploy/helm/quotaring`, checked offline (no Helm binary, no cluster here):
 * rendered by test/helpers/helm-render.ts (a pinned subset of Helm's templates) and compared with a
 * golden render; every rendered object validated against the Kubernetes OpenAPI schemas shipped by
 * `kubernetes-models` (and the prometheus-operator CRD schema for the ServiceMonitor), with fields
 * the schema does not know refused (as `kubectl --validate=strict`); then what the chart promises
 * checked against the code: ports (of containers, Services and NetworkPolicies), probes, commands
 * (the advertised URL a node builds from its pod IP, IPv4 and IPv6), every environment variable the
 * code reads for the rendered config, the termination grace against the config's handoff drain and
 * grace, the preStop drain against the admin route, selectors (PDBs, NetworkPolicy peers), and every
 * value documented and used.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { renderChart, renderedObjects } from '../helpers/helm-render.ts';
import type { RenderedFile } from '../helpers/helm-render.ts';
import { envReads } from '../helpers/env-reads.ts';
import { advertiseUrl } from '../../src/gateway/advertise-url.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CHART = resolve(ROOT, 'deploy/helm/quotaring');
const GOLDEN = resolve(ROOT, 'test/fixtures/helm/quotaring.golden.yaml');
const text = (rel: string): string => readFileSync(resolve(ROOT, rel), 'utf8');
const RELEASE = { Name: 'qr', Namespace: 'llm' };

/** Values of the renders under test: the required secrets, and every optional object switched on. */
const SECRETS = {
  clusterSecret: 'c'.repeat(44),
  adminToken: 'a'.repeat(32),
  providerKeys: { OPENAI_API_KEY: 'sk-test', EXAMPLE_TENANT_KEY: 'qr-example-key' },
  redis: { QUOTARING_REDIS_URL: 'rediss://redis.example:6380' },
};
/** NetworkPolicy peers and egress rules of the renders under test. */
const PROMETHEUS = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } }, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } } };
const OPERATORS = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ops' } } };
const EGRESS = [
  { to: [{ namespaceSelector: {}, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }], ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] },
  { to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['169.254.169.254/32'] } }], ports: [{ port: 443, protocol: 'TCP' }, { port: 6380, protocol: 'TCP' }] },
];
const FULL = {
  secrets: SECRETS,
  serviceMonitor: { enabled: true, labels: { release: 'prometheus' } },
  grafanaDashboard: { enabled: true },
  networkPolicy: { enabled: true, nodeFrom: [PROMETHEUS], adminFrom: [OPERATORS], egress: EGRESS },
};
/** The NetworkPolicies with their defaults, and routers restricted to an ingress controller's namespace. */
const NETPOL_DEFAULTS = { secrets: SECRETS, networkPolicy: { enabled: true } };
const NETPOL_ROUTER_FROM = { secrets: SECRETS, networkPolicy: { enabled: true, routerFrom: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'ingress-nginx' } } }] } };
const SENTINEL = {
  secrets: { ...SECRETS, redis: { QUOTARING_REDIS_PASSWORD: 'pw', QUOTARING_SENTINEL_PASSWORD: 'spw' } },
  config: {
    cluster: {
      redis: {
        url_env: null,
        sentinels: [{ host: 'redis-sentinel-0.redis', port: 26379 }, { host: 'redis-sentinel-1.redis', port: 26379 }, { host: 'redis-sentinel-2.redis', port: 26379 }],
        name: 'mymaster',
        username_env: 'QUOTARING_REDIS_USERNAME',
        password_env: 'QUOTARING_REDIS_PASSWORD',
        sentinel_password_env: 'QUOTARING_SENTINEL_PASSWORD',
        tls: { ca_file: '/etc/quotaring/redis-ca/ca.crt' },
      },
    },
  },
  extraVolumes: [{ name: 'redis-ca', secret: { secretName: 'redis-ca' } }],
  extraVolumeMounts: [{ name: 'redis-ca', mountPath: '/etc/quotaring/redis-ca', readOnly: true }],
  node: { antiAffinity: { required: true } },
  router: { autoscaling: { enabled: false } },
};

type Obj = Record<string, unknown>;
const files = renderChart(CHART, FULL, RELEASE);
const objects = renderedObjects(files).map((o) => o.object);
const find = (kind: string, name: string): Obj => {
  const o = objects.find((x) => x.kind === kind && (x.metadata as Obj).name === name);
  assert.ok(o, `${kind}/${name} not rendered`);
  return o;
};
const get = (o: unknown, path: string): unknown => path.split('.').reduce<unknown>((v, k) => (v as Obj | undefined)?.[k], o);

/** The golden file: every template's output, under a `# Source:` line as `helm template` prints it. */
function goldenText(rendered: readonly RenderedFile[]): string {
  return rendered.map((f) => `# Source: quotaring/${f.name}\n${f.text.trim()}\n`).join('---\n');
}

describe('Helm chart: render', () => {
  test('renders as the golden file says (UPDATE_GOLDEN=1 rewrites it after a deliberate change)', () => {
    const out = goldenText(files);
    if (process.env.UPDATE_GOLDEN === '1') writeFileSync(GOLDEN, out);
    assert.equal(out, readFileSync(GOLDEN, 'utf8'));
  });

  test('renders these objects with all options on, and without the optional ones by default', () => {
    const names = (list: Obj[]) => list.map((o) => `${String(o.kind)}/${String(get(o, 'metadata.name'))}`);
    assert.deepEqual(names(objects), [
      'ConfigMap/qr-config',
      'ServiceMonitor/qr',
      'ConfigMap/qr-dashboard',
      'NetworkPolicy/qr-node',
      'NetworkPolicy/qr-router',
      'StatefulSet/qr-node',
      'Service/qr-node',
      'PodDisruptionBudget/qr-node',
      'Deployment/qr-router',
      'Service/qr-router',
      'PodDisruptionBudget/qr-router',
      'HorizontalPodAutoscaler/qr-router',
      'Secret/qr-cluster',
      'Secret/qr-admin',
      'Secret/qr-env',
    ]);
    const plain = renderedObjects(renderChart(CHART, { secrets: SECRETS }, RELEASE)).map((o) => o.object);
    assert.deepEqual(names(plain).filter((n) => !names(objects).includes(n)), []);
    assert.deepEqual(names(objects).filter((n) => !names(plain).includes(n)), ['ServiceMonitor/qr', 'ConfigMap/qr-dashboard', 'NetworkPolicy/qr-node', 'NetworkPolicy/qr-router']);
    const external = renderedObjects(renderChart(CHART, { secrets: { create: false } }, RELEASE)).map((o) => o.object);
    assert.deepEqual(external.filter((o) => o.kind === 'Secret'), [], 'secrets.create: false renders no Secret');
  });

  test('refuses to render without the cluster secret or the admin token', () => {
    assert.throws(() => renderChart(CHART, {}, RELEASE), /templates\/secrets\.yaml: required: secrets\.clusterSecret/);
    assert.throws(() => renderChart(CHART, { secrets: { clusterSecret: 'x'.repeat(40) } }, RELEASE), /required: secrets\.adminToken/);
  });
});

/** A model class of kubernetes-models: only its prototype's validate is used (on the raw object). */
type ModelClass = { prototype: { validate(this: unknown): void } };
const MODELS: Record<string, [string, string]> = {
  'v1/ConfigMap': ['kubernetes-models/v1/ConfigMap', 'ConfigMap'],
  'v1/Secret': ['kubernetes-models/v1/Secret', 'Secret'],
  'v1/Service': ['kubernetes-models/v1/Service', 'Service'],
  'apps/v1/Deployment': ['kubernetes-models/apps/v1/Deployment', 'Deployment'],
  'apps/v1/StatefulSet': ['kubernetes-models/apps/v1/StatefulSet', 'StatefulSet'],
  'autoscaling/v2/HorizontalPodAutoscaler': ['kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler', 'HorizontalPodAutoscaler'],
  'policy/v1/PodDisruptionBudget': ['kubernetes-models/policy/v1/PodDisruptionBudget', 'PodDisruptionBudget'],
  'networking.k8s.io/v1/NetworkPolicy': ['kubernetes-models/networking.k8s.io/v1/NetworkPolicy', 'NetworkPolicy'],
  'monitoring.coreos.com/v1/ServiceMonitor': ['@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor', 'ServiceMonitor'],
};
const INSTALL = 'npm i -D kubernetes-models@4.5.1 @kubernetes-models/prometheus-operator@4.4.4';

async function loadModels(): Promise<Map<string, ModelClass> | string> {
  const out = new Map<string, ModelClass>();
  try {
    for (const [key, [specifier, name]] of Object.entries(MODELS)) {
      const mod = (await import(specifier)) as Record<string, ModelClass>;
      out.set(key, mod[name] as ModelClass);
    }
  } catch (err) {
    return `the Kubernetes schemas are not installed (${(err as Error).message.split('\n')[0]}): run \`${INSTALL}\``;
  }
  return out;
}
const models = await loadModels();

/**
 * Validates `object` with a compiled schema validator and returns the paths of the fields the
 * validator never looked at: fields the schema does not define (the compiled validators read each
 * defined property by name, and enumerate the keys of maps, whose entries are then all known).
 */
function validateStrict(model: ModelClass, object: Obj): string[] {
  const read = new Set<string>();
  const enumerated = new Set<string>();
  const track = (value: unknown, path: string): unknown => {
    if (value === null || typeof value !== 'object') return value;
    return new Proxy(value, {
      get(target, key, receiver) {
        const v: unknown = Reflect.get(target, key, receiver);
        if (typeof key !== 'string' || !Object.hasOwn(target, key)) return v;
        read.add(`${path}/${key}`);
        return track(v, `${path}/${key}`);
      },
      has(target, key) {
        if (typeof key === 'string') read.add(`${path}/${key}`);
        return Reflect.has(target, key);
      },
      ownKeys(target) {
        enumerated.add(path);
        return Reflect.ownKeys(target);
      },
    });
  };
  model.prototype.validate.call(track(object, ''));
  const unknown: string[] = [];
  const walk = (value: unknown, path: string): void => {
    if (value === null || typeof value !== 'object') return;
    for (const [k, v] of Object.entries(value)) {
      const p = `${path}/${k}`;
      if (!read.has(p) && !enumerated.has(path)) unknown.push(p);
      else walk(v, p);
    }
  };
  walk(object, '');
  return unknown;
}

describe('Helm chart: every object is valid against the Kubernetes OpenAPI schemas', { skip: typeof models === 'string' ? models : false }, () => {
  const renders = {
    full: objects,
    sentinel: renderedObjects(renderChart(CHART, SENTINEL, RELEASE)).map((o) => o.object),
    'network policies by default': renderedObjects(renderChart(CHART, NETPOL_DEFAULTS, RELEASE)).map((o) => o.object),
    'routers from a namespace only': renderedObjects(renderChart(CHART, NETPOL_ROUTER_FROM, RELEASE)).map((o) => o.object),
  };
  for (const [variant, list] of Object.entries(renders)) {
    test(`${variant}: valid, no field the schema does not define`, () => {
      const map = models as Map<string, ModelClass>;
      for (const o of list) {
        const key = `${String(o.apiVersion)}/${String(o.kind)}`;
        const model = map.get(key);
        assert.ok(model, `${key}: no schema`);
        const name = `${key} ${String(get(o, 'metadata.name'))}`;
        assert.doesNotThrow(() => validateStrict(model, o), name);
        assert.deepEqual(validateStrict(model, o), [], `${name}: fields unknown to the schema`);
      }
    });
  }

  test('the validation catches what it should: a wrong type, a missing required field, an unknown field', () => {
    const map = models as Map<string, ModelClass>;
    const policy = structuredClone(find('NetworkPolicy', 'qr-node'));
    const policyModel = map.get('networking.k8s.io/v1/NetworkPolicy') as ModelClass;
    ((get(policy, 'spec.ingress') as Obj[])[0] as Obj).from = [{ podSelectr: {} }];
    assert.deepEqual(validateStrict(policyModel, policy), ['/spec/ingress/0/from/0/podSelectr']);
    const deployment = structuredClone(find('Deployment', 'qr-router'));
    const model = map.get('apps/v1/Deployment') as ModelClass;
    (get(deployment, 'spec.template.spec.containers') as Obj[])[0]!.ports = [{ containerPort: '8080' }];
    assert.throws(() => validateStrict(model, deployment), /containerPort must be integer/);
    const noSelector = structuredClone(find('Deployment', 'qr-router'));
    delete (noSelector.spec as Obj).selector;
    assert.throws(() => validateStrict(model, noSelector), /must have required property '?selector/);
    const typo = structuredClone(find('Deployment', 'qr-router'));
    ((get(typo, 'spec.template.spec.containers') as Obj[])[0]!.readinessProbe as Obj).periodSecond = 2;
    assert.deepEqual(validateStrict(model, typo), ['/spec/template/spec/containers/0/readinessProbe/periodSecond']);
  });
});

describe('Helm chart: what it promises matches the code', () => {
  const configMap = find('ConfigMap', 'qr-config');
  const rawConfig = parse(get(configMap, 'data') ? (get(configMap, 'data') as Obj)['config.yaml'] as string : '') as unknown;
  const node = find('StatefulSet', 'qr-node');
  const router = find('Deployment', 'qr-router');
  const container = (o: Obj): Obj => (get(o, 'spec.template.spec.containers') as Obj[])[0] as Obj;
  const secretKeys = (name: string): string[] => Object.keys((get(find('Secret', name), 'stringData') as Obj | null) ?? {});
  const cliCommands = [...text('src/cli.ts').matchAll(/\.command\('([a-z]+)'\)/g)].map((m) => m[1]);

  test('the ConfigMap holds a config the project\'s loader accepts', () => {
    const { loaded } = envReads({ raw: rawConfig, name: 'configmap/config.yaml' });
    assert.equal(loaded.config.cluster.redis?.url_env, 'QUOTARING_REDIS_URL');
    assert.equal(loaded.config.admin.host, '127.0.0.1', 'the admin API stays on the pod\'s loopback');
  });

  for (const [what, workload, command, portKey] of [
    ['node', node, 'node', 'server'],
    ['router', router, 'router', 'router'],
  ] as const) {
    test(`${what}: runs \`${command} --config\` on the mounted ConfigMap, listens on the config's ${portKey}.port, probes /readyz and /healthz there`, () => {
      const { loaded } = envReads({ raw: rawConfig, name: 'config.yaml' });
      const c = container(workload);
      const args = c.args as string[];
      assert.ok(cliCommands.includes(args[0]), `${args[0]} is a quotaring command`);
      assert.equal(args[0], command);
      const mount = (c.volumeMounts as Obj[]).find((m) => m.name === 'config') as Obj;
      assert.equal(args[args.indexOf('--config') + 1], `${String(mount.mountPath)}/config.yaml`);
      assert.equal(get((get(workload, 'spec.template.spec.volumes') as Obj[]).find((v) => v.name === 'config'), 'configMap.name'), 'qr-config');
      assert.deepEqual(c.ports, [{ name: 'http', containerPort: loaded.config[portKey].port, protocol: 'TCP' }]);
      assert.equal(loaded.config[portKey].host, '0.0.0.0');
      assert.deepEqual(get(c, 'readinessProbe.httpGet'), { path: '/readyz', port: 'http' });
      assert.deepEqual(get(c, 'livenessProbe.httpGet'), { path: '/healthz', port: 'http' });
      const source = text(what === 'node' ? 'src/gateway/server.ts' : 'src/router/server.ts');
      assert.match(source, /app\.get\('\/readyz'/);
      assert.match(source, /app\.get\('\/healthz'/);
      assert.equal(get(workload, 'spec.template.spec.securityContext.runAsNonRoot'), true);
      assert.equal(get(c, 'securityContext.readOnlyRootFilesystem'), true);
      assert.ok((c.volumeMounts as Obj[]).some((m) => m.mountPath === '/var/lib/quotaring'), 'the image\'s working directory (state_dir) is writable');
    });

    test(`${what}: every environment variable the code reads for the rendered config comes from the chart's Secrets or the pod`, () => {
      const { names } = envReads({ raw: rawConfig, name: 'config.yaml' });
      const c = container(workload);
      const provided = new Set<string>([
        ...((c.env as Obj[] | undefined) ?? []).map((e) => String(e.name)),
        ...(c.envFrom as Obj[]).flatMap((e) => secretKeys(String(get(e, 'secretRef.name')))),
      ]);
      const optional = new Set(['QUOTARING_CLUSTER_SECRET_PREVIOUS']); // only during a rotation
      assert.deepEqual(names.filter((n) => !provided.has(n) && !optional.has(n)), []);
      assert.deepEqual(names, ['EXAMPLE_TENANT_KEY', 'OPENAI_API_KEY', 'QUOTARING_ADMIN_TOKEN', 'QUOTARING_CLUSTER_SECRET', 'QUOTARING_CLUSTER_SECRET_PREVIOUS', 'QUOTARING_REDIS_URL']);
    });
  }

  test('the Sentinel variant: the env names its config reads are in the redis Secret values; the CA volume is mounted where tls.ca_file points', () => {
    const list = renderedObjects(renderChart(CHART, SENTINEL, RELEASE)).map((o) => o.object);
    const cm = list.find((o) => o.kind === 'ConfigMap' && get(o, 'metadata.name') === 'qr-config') as Obj;
    const raw = parse((get(cm, 'data') as Obj)['config.yaml'] as string) as unknown;
    const { names, loaded } = envReads({ raw, name: 'config.yaml' });
    const env = list.find((o) => o.kind === 'Secret' && get(o, 'metadata.name') === 'qr-env') as Obj;
    const provided = new Set([...Object.keys(get(env, 'stringData') as Obj), 'QUOTARING_ADMIN_TOKEN', 'QUOTARING_CLUSTER_SECRET', 'QUOTARING_CLUSTER_SECRET_PREVIOUS', 'QUOTARING_REDIS_USERNAME']);
    assert.deepEqual(names.filter((n) => !provided.has(n)), []);
    assert.ok(names.includes('QUOTARING_SENTINEL_PASSWORD'));
    assert.equal(loaded.config.cluster.redis?.sentinels?.length, 3);
    for (const kind of ['StatefulSet', 'Deployment']) {
      const w = list.find((o) => o.kind === kind) as Obj;
      const mounts = (container(w).volumeMounts as Obj[]).map((m) => String(m.mountPath));
      assert.ok(mounts.some((m) => loaded.config.cluster.redis?.tls?.ca_file?.startsWith(`${m}/`)), `${kind}: ${mounts.join(', ')}`);
    }
    const sts = list.find((o) => o.kind === 'StatefulSet') as Obj;
    assert.ok(get(sts, 'spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution'));
    assert.equal(list.filter((o) => o.kind === 'HorizontalPodAutoscaler').length, 0);
    assert.equal(get(list.find((o) => o.kind === 'Deployment'), 'spec.replicas'), 2);
  });

  test('nodes: the member id is the pod name; the advertised URL is built by the node from the pod IP on server.port, an IPv6 one in brackets', () => {
    const { loaded } = envReads({ raw: rawConfig, name: 'config.yaml' });
    const c = container(node);
    const args = c.args as string[];
    assert.equal(args[args.indexOf('--id') + 1], '$(POD_NAME)');
    assert.equal(args.includes('--url'), false, 'no URL assembled in the template: it could not bracket an IPv6 pod IP');
    assert.equal(args[args.indexOf('--advertise-host') + 1], '$(POD_IP)');
    assert.deepEqual(c.env, [
      { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
    ]);
    // The CLI option the args name, passed to startGateway, which builds the URL with advertiseUrl.
    assert.match(text('src/cli.ts'), /\.option\('--advertise-host <host>'/);
    assert.match(text('src/cli.ts'), /advertiseHost: opts\.advertiseHost/);
    assert.match(text('src/gateway/start.ts'), /advertiseUrl\(\{ url: opts\.advertiseUrl, advertiseHost: opts\.advertiseHost, host, port,/);
    // What the node advertises once Kubernetes has expanded $(POD_IP), on an IPv4 and an IPv6 cluster.
    const advertised = (podIp: string) =>
      advertiseUrl({ advertiseHost: (args[args.indexOf('--advertise-host') + 1] as string).replace('$(POD_IP)', podIp), host: loaded.config.server.host, port: loaded.config.server.port, resolveWildcard: true }, {});
    assert.equal(advertised('10.244.1.7'), 'http://10.244.1.7:8080');
    assert.equal(advertised('fd00:10:244::7'), 'http://[fd00:10:244::7]:8080');
    assert.equal(new URL(advertised('fd00:10:244::7')).port, String(get(c, 'ports.0.containerPort')));
  });

  test('IPv6 clusters: the documented listen address `::` is one the config loader accepts, for nodes and routers', () => {
    const raw = parse((get(renderedObjects(renderChart(CHART, { secrets: SECRETS, config: { server: { host: '::' }, router: { host: '::' } } }, RELEASE)).map((o) => o.object).find((o) => o.kind === 'ConfigMap'), 'data') as Obj)['config.yaml'] as string) as unknown;
    const { loaded } = envReads({ raw, name: 'config.yaml' });
    assert.equal(loaded.config.server.host, '::');
    assert.equal(loaded.config.router.host, '::');
    assert.match(text('deploy/helm/quotaring/values.yaml'), /IPv6 or dual-stack clusters: "::"/);
  });

  test('nodes: the preStop drains through the admin API (loopback, the token variable and port of the config), and the termination grace covers it, handoff.drain and handoff.grace', () => {
    const { loaded } = envReads({ raw: rawConfig, name: 'config.yaml' });
    const script = (get(container(node), 'lifecycle.preStop.exec.command') as string[])[2] ?? '';
    assert.match(text('src/ops/admin-routes.ts'), /admin\.post\('\/admin\/v1\/drain'/);
    assert.ok(script.includes(`fetch('http://${loaded.config.admin.host}:${loaded.config.admin.port}/admin/v1/drain'`), script);
    assert.ok(script.includes(`process.env.${loaded.config.admin.token_env};`), script);
    const timeoutS = Number(/AbortSignal\.timeout\((\d+) \* 1000\)/.exec(script)?.[1]);
    assert.equal(timeoutS, 20);
    const graceS = get(node, 'spec.template.spec.terminationGracePeriodSeconds') as number;
    const { drain, grace } = loaded.config.cluster.handoff;
    assert.ok(graceS * 1_000 > timeoutS * 1_000 + drain + grace, `${graceS} s ≤ ${timeoutS} s + ${drain} ms + ${grace} ms`);
    // The script is JavaScript node can parse.
    assert.doesNotThrow(() => new Function(script.replace(/process\.exit\(\d\)/g, 'void 0')));
  });

  test('routers: the preStop sleeps before SIGTERM; the HPA scales the router Deployment on CPU, which has a CPU request', () => {
    assert.deepEqual(get(container(router), 'lifecycle.preStop.exec.command'), ['sleep', '5']);
    const hpa = find('HorizontalPodAutoscaler', 'qr-router');
    assert.deepEqual(get(hpa, 'spec.scaleTargetRef'), { apiVersion: 'apps/v1', kind: 'Deployment', name: 'qr-router' });
    assert.ok(get(container(router), 'resources.requests.cpu'));
    assert.equal(get(router, 'spec.replicas'), undefined, 'the HPA owns replicas');
  });

  test('selectors: Services, the PDB and the anti-affinity select exactly the pods they are for; the ServiceMonitor scrapes the port named http of both Services at /metrics', () => {
    const podLabels = (o: Obj) => get(o, 'spec.template.metadata.labels') as Obj;
    assert.deepEqual(get(find('Service', 'qr-node'), 'spec.selector'), podLabels(node));
    assert.deepEqual(get(find('Service', 'qr-router'), 'spec.selector'), podLabels(router));
    assert.deepEqual(get(find('PodDisruptionBudget', 'qr-node'), 'spec.selector.matchLabels'), podLabels(node));
    assert.equal(get(find('PodDisruptionBudget', 'qr-node'), 'spec.maxUnavailable'), 1);
    assert.deepEqual(get(find('PodDisruptionBudget', 'qr-router'), 'spec.selector.matchLabels'), podLabels(router));
    assert.equal(get(find('PodDisruptionBudget', 'qr-router'), 'spec.maxUnavailable'), 1, 'a maximum: one router never blocks a machine drain');
    assert.equal(get(find('PodDisruptionBudget', 'qr-router'), 'spec.minAvailable'), undefined);
    const term = (get(node, 'spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution') as Obj[])[0];
    assert.deepEqual(get(term, 'podAffinityTerm.labelSelector.matchLabels'), podLabels(node));
    assert.deepEqual(get(node, 'spec.selector.matchLabels'), podLabels(node));
    assert.deepEqual(get(router, 'spec.selector.matchLabels'), podLabels(router));
    const sm = find('ServiceMonitor', 'qr');
    for (const svc of [find('Service', 'qr-node'), find('Service', 'qr-router')]) {
      const labels = get(svc, 'metadata.labels') as Obj;
      for (const [k, v] of Object.entries(get(sm, 'spec.selector.matchLabels') as Obj)) assert.equal(labels[k], v);
      assert.ok((get(svc, 'spec.ports') as Obj[]).some((p) => p.name === 'http'));
    }
    assert.deepEqual(get(sm, 'spec.endpoints'), [{ port: 'http', path: '/metrics', interval: '15s' }]);
    assert.equal(get(sm, 'metadata.labels.release'), 'prometheus');
    assert.match(text('src/router/server.ts'), /app\.get\('\/metrics'/);
    assert.match(text('src/ops/node-routes.ts'), /app\.get\('\/metrics'/);
  });

  test('NetworkPolicies: nodes\' API port only from routers, nodes and nodeFrom; admin ports only from adminFrom; routers\' port from anywhere or routerFrom; the ports are the ones the code listens on', () => {
    const podLabels = (o: Obj) => get(o, 'spec.template.metadata.labels') as Obj;
    const ports = (rule: unknown) => get(rule, 'ports') as Obj[];
    const check = (overrides: Obj, expectPorts: { server: number; router: number; admin: number; routerAdmin: number }) => {
      const list = renderedObjects(renderChart(CHART, overrides, RELEASE)).map((o) => o.object);
      const cm = list.find((o) => o.kind === 'ConfigMap' && get(o, 'metadata.name') === 'qr-config') as Obj;
      const { loaded } = envReads({ raw: parse((get(cm, 'data') as Obj)['config.yaml'] as string) as unknown, name: 'config.yaml' });
      // The ports the code reads (the schema's defaults, or the values' overrides), and the containers' ports.
      assert.deepEqual(
        { server: loaded.config.server.port, router: loaded.config.router.port, admin: loaded.config.admin.port, routerAdmin: loaded.config.admin.router_port },
        expectPorts,
      );
      const sts = list.find((o) => o.kind === 'StatefulSet') as Obj;
      const dep = list.find((o) => o.kind === 'Deployment') as Obj;
      const nodePolicy = list.find((o) => o.kind === 'NetworkPolicy' && get(o, 'metadata.name') === 'qr-node') as Obj;
      const routerPolicy = list.find((o) => o.kind === 'NetworkPolicy' && get(o, 'metadata.name') === 'qr-router') as Obj;
      assert.deepEqual(get(nodePolicy, 'spec.podSelector.matchLabels'), podLabels(sts));
      assert.deepEqual(get(routerPolicy, 'spec.podSelector.matchLabels'), podLabels(dep));

      const [nodeApi, nodeAdmin, ...moreNode] = get(nodePolicy, 'spec.ingress') as Obj[];
      assert.deepEqual(moreNode, []);
      assert.deepEqual(ports(nodeApi), [{ port: loaded.config.server.port, protocol: 'TCP' }]);
      assert.equal(get(container(sts), 'ports.0.containerPort'), loaded.config.server.port);
      assert.deepEqual(get(nodeApi, 'from'), [{ podSelector: { matchLabels: podLabels(dep) } }, { podSelector: { matchLabels: podLabels(sts) } }, PROMETHEUS]);
      assert.deepEqual(nodeAdmin, { ports: [{ port: loaded.config.admin.port, protocol: 'TCP' }], from: [OPERATORS] });

      const [routerApi, routerAdmin, ...moreRouter] = get(routerPolicy, 'spec.ingress') as Obj[];
      assert.deepEqual(moreRouter, []);
      assert.deepEqual(routerApi, { ports: [{ port: loaded.config.router.port, protocol: 'TCP' }] }, 'no `from`: any source');
      assert.equal(get(container(dep), 'ports.0.containerPort'), loaded.config.router.port);
      assert.deepEqual(routerAdmin, { ports: [{ port: loaded.config.admin.router_port, protocol: 'TCP' }], from: [OPERATORS] });

      // Egress: the user's rules, after the in-release one (routers and nodes → nodes' API).
      for (const policy of [nodePolicy, routerPolicy]) {
        assert.deepEqual(get(policy, 'spec.policyTypes'), ['Ingress', 'Egress']);
        assert.deepEqual(get(policy, 'spec.egress'), [{ ports: [{ port: loaded.config.server.port, protocol: 'TCP' }], to: [{ podSelector: { matchLabels: podLabels(sts) } }] }, ...EGRESS]);
      }
    };
    check(FULL, { server: 8080, router: 8080, admin: 9100, routerAdmin: 9200 });
    // Other ports in the config: the policies follow them (no port written twice).
    check({ ...FULL, config: { server: { port: 8181 }, router: { port: 8282 }, admin: { port: 9101, router_port: 9201 } } }, { server: 8181, router: 8282, admin: 9101, routerAdmin: 9201 });
    // Code: the ports each process listens on are these config keys.
    assert.match(text('src/router/server.ts'), /port: opts\.port \?\? settings\.port/);
    assert.match(text('src/gateway/start.ts'), /const port = opts\.port \?\? server\.port;/);

    // Defaults: ingress only (egress open: providers and Redis may be anywhere), no admin rule (the admin listeners are on loopback), routers from anywhere.
    const defaults = renderedObjects(renderChart(CHART, NETPOL_DEFAULTS, RELEASE)).map((o) => o.object).filter((o) => o.kind === 'NetworkPolicy');
    assert.equal(defaults.length, 2);
    for (const policy of defaults) {
      assert.deepEqual(get(policy, 'spec.policyTypes'), ['Ingress']);
      assert.equal(get(policy, 'spec.egress'), undefined);
      assert.equal((get(policy, 'spec.ingress') as Obj[]).length, 1);
    }
    assert.deepEqual((get(defaults[1], 'spec.ingress') as Obj[])[0], { ports: [{ port: 8080, protocol: 'TCP' }] });
    assert.equal(((get(defaults[0], 'spec.ingress.0.from') as Obj[]) ?? []).length, 2, 'nodes: routers and nodes only');
    const restricted = renderedObjects(renderChart(CHART, NETPOL_ROUTER_FROM, RELEASE)).map((o) => o.object).find((o) => o.kind === 'NetworkPolicy' && get(o, 'metadata.name') === 'qr-router');
    assert.deepEqual(get(restricted, 'spec.ingress.0.from'), NETPOL_ROUTER_FROM.networkPolicy.routerFrom);
  });

  test('the dashboard ConfigMap carries deploy/grafana/dashboards/quotaring.json unchanged', () => {
    const data = get(find('ConfigMap', 'qr-dashboard'), 'data') as Obj;
    assert.deepEqual(JSON.parse(data['quotaring.json'] as string), JSON.parse(text('deploy/grafana/dashboards/quotaring.json')));
    assert.equal(text('deploy/helm/quotaring/files/quotaring-dashboard.json'), text('deploy/grafana/dashboards/quotaring.json'));
  });

  test('every value in values.yaml is documented by a comment, exists where a template reads it, and is read by a template', () => {
    const lines = text('deploy/helm/quotaring/values.yaml').split('\n');
    const undocumented: string[] = [];
    lines.forEach((line, i) => {
      const key = /^(\s*)(- )?([A-Za-z_][\w]*):/.exec(line);
      if (key === null) return;
      const indent = (key[1] as string).length;
      // A field of a list item (after its first line) is described by the item's comment.
      for (let j = i - 1; j >= 0; j--) {
        const m = /^(\s*)(- )?\S/.exec(lines[j] as string);
        if (m === null || (lines[j] as string).trim().startsWith('#')) continue;
        if ((m[1] as string).length < indent) {
          if (m[2] !== undefined && key[2] === undefined) return;
          break;
        }
      }
      const previous = (lines[i - 1] ?? '').trim();
      if (!previous.startsWith('#')) undocumented.push(`line ${i + 1}: ${line.trim()}`);
    });
    assert.deepEqual(undocumented, []);

    const values = parse(text('deploy/helm/quotaring/values.yaml')) as Obj;
    const templates = files.map((f) => readFileSync(resolve(CHART, f.name), 'utf8')).join('\n');
    const read = [...new Set([...templates.matchAll(/\.Values\.([\w.]+)/g)].map((m) => m[1] as string))];
    assert.deepEqual(read.filter((p) => get(values, p) === undefined), [], 'read by a template, missing from values.yaml');
    const leaves: string[] = [];
    const walk = (v: unknown, path: string): void => {
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0 && path !== 'config' && !path.startsWith('config.')) {
        for (const [k, c] of Object.entries(v)) walk(c, path === '' ? k : `${path}.${k}`);
      } else leaves.push(path);
    };
    walk(values, '');
    assert.deepEqual(leaves.filter((l) => !read.some((r) => l === r || l.startsWith(`${r}.`))), [], 'in values.yaml, read by no template');
  });
});

describe('Helm chart renderer (the subset)', () => {
  test('refuses what it does not implement instead of rendering it wrong', () => {
    // Guard against a template growing beyond the subset: every action of every template is parsed by the render above.
    assert.throws(() => renderChart(resolve(ROOT, 'test/fixtures/helm/unsupported-chart'), {}, RELEASE), /not in the supported subset: \{\{ range/);
  });
});

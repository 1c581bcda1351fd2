/**
 * Import rules of src/ (run by `npm run lint`): no import circle between files, and no import from
 * a higher layer into a lower one. The layers, lowest first, are documented in docs/internals.md
 * ("Layers"). No violation is tolerated.
 */
const LAYERS = [
  ['base', '^src/(clock|errors|error-reply|version|lingering-drain|exit-with-parent)\\.ts$'],
  ['algorithms', '^src/(limiter|tokens|pricing|replay)/'],
  ['telemetry', '^src/ops/(metrics|logging|node-activity|usd-counter|request-path-metrics|fair-share-metrics|provider-feedback-metrics|scrape-counter)\\.ts$'],
  ['contracts', '^src/coord/(types|headers)\\.ts$'],
  ['config', '^src/config/(?!(load|reloadable)\\.ts$)'],
  ['edges', '^src/(providers|security|catalogue)/'],
  ['config-load', '^src/config/(load|reloadable)\\.ts$'],
  ['http', '^src/http/'],
  ['redis', '^src/redis/'],
  ['shared-state', '^src/(globalcap|central|fairshare)/'],
  ['coordination', '^src/coord/(?!(types|headers)\\.ts$)'],
  ['node', '^src/gateway/(?!(server|start)\\.ts$)'],
  ['router', '^src/router/(?!server\\.ts$)'],
  ['operations', '^src/(ops/(?!(metrics|logging|node-activity|usd-counter|request-path-metrics|fair-share-metrics|provider-feedback-metrics|scrape-counter)\\.ts$)|simulator/)'],
  ['peer', '^src/peer/'],
  ['composition', '^(src/gateway/(server|start)\\.ts|src/router/server\\.ts|src/cli\\.ts)$|^cluster/'],
];

const upward = LAYERS.flatMap(([name, path], i) => {
  const higher = LAYERS.slice(i + 1).map(([, p]) => `(${p})`);
  return higher.length === 0 ? [] : [{ name: `layer-${name}`, comment: `${name} imports nothing from a higher layer`, severity: 'error', from: { path }, to: { path: higher.join('|') } }];
});

module.exports = {
  forbidden: [
    { name: 'no-circular', comment: 'no import circle between files of src/ (type imports included)', severity: 'error', from: { path: '^(src|cluster)/' }, to: { circular: true } },
    ...upward,
    { name: 'router-not-node', comment: 'the router (its server.ts included) imports nothing from the gateway node: what both need lives in src/http/ or lower', severity: 'error', from: { path: '^src/router/' }, to: { path: '^src/gateway/' } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};

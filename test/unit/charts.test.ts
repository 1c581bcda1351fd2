/**
 * The benchmark's chart renderer (bench/lib/charts.ts): each chart is rendered headless from a small
 * fixed dataset and the SVG text is checked for what a reader needs to see: the title, axis titles
 * with units, the bar labels (req/s rounded to an integer: 3843.4 -> "3843", 2511.5 -> "2512"),
 * group labels ("1 node", "3 nodes", a nodes-0 row under its setup name), legend entries and
 * panel titles. Geometry is checked where it is exact: a bar label sits centred 3 px above its bar
 * (dy 3 px plus vega's 2 px bottom-baseline shift), on the CDF (plot height 320) p50 is drawn at y = 160 and a 0 ms point is
 * drawn at exactly the x of a 0.1 ms point (the log-scale clamp), the limit lines are dashed,
 * horizontal and in the tenant's colour. Empty input is a RangeError.
 *
 * Set CHARTS_OUT=1 to write the rendered SVGs to a fresh temp dir (printed) to look at them.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import { latencyCdfChart, renderSvg, tenantMinuteChart, throughputChart } from '../../bench/lib/charts.ts';

let outDir: string | undefined;
function keep(t: TestContext, name: string, svg: string, ms: number): void {
  t.diagnostic(`${name}: ${svg.length} bytes, rendered in ${ms.toFixed(0)} ms`);
  if (process.env.CHARTS_OUT === undefined) return;
  outDir ??= mkdtempSync(join(tmpdir(), 'quotaring-charts-'));
  const file = join(outDir, `${name}.svg`);
  writeFileSync(file, svg);
  t.diagnostic(`wrote ${file}`);
}

async function timed(render: () => Promise<string>): Promise<[string, number]> {
  const start = performance.now();
  const svg = await render();
  return [svg, performance.now() - start];
}

/** Text of the `<text>` elements inside every `<g class="mark-text role-…">` group of that role. */
function texts(svg: string, role: string): string[] {
  const out: string[] = [];
  const groups = new RegExp(`<g class="mark-text role-${role}\\b[^"]*"[^>]*>(.*?)</g>`, 'g');
  for (const g of svg.matchAll(groups)) {
    for (const m of (g[1] ?? '').matchAll(/<text[^>]*>(.*?)<\/text>/g)) {
      // A wrapped label is one <tspan> per line: read it back as one line.
      const lines = [...(m[1] ?? '').matchAll(/<tspan[^>]*>([^<]*)<\/tspan>/g)].map((l) => l[1] ?? '');
      out.push(lines.length > 0 ? lines.reduce((a, l) => (a.endsWith('-') ? a + l : `${a} ${l}`)) : (m[1] ?? ''));
    }
  }
  return out;
}

function size(svg: string): { width: number; height: number } {
  const m = /^<svg [^>]*width="(\d+)" height="(\d+)"/.exec(svg);
  assert.ok(m, 'svg root has width and height');
  return { width: Number(m[1]), height: Number(m[2]) };
}

/** Common to every chart: an SVG document, white background, the title, a sane width for ~720 px. */
function assertDocument(svg: string, title: string): void {
  assert.ok(svg.startsWith('<svg'), svg.slice(0, 80));
  assert.ok(svg.trimEnd().endsWith('</svg>'));
  const { width, height } = size(svg);
  assert.match(svg, new RegExp(`^<svg[^>]*><rect width="${width}" height="${height}" fill="white"/>`));
  assert.ok(width >= 600 && width <= 760, `width ${width}`);
  assert.ok(!svg.includes('NaN'), 'no NaN coordinates');
  assert.equal(texts(svg, 'title-text').at(-1), title);
}

describe('throughputChart', () => {
  const title = 'Throughput by cluster size (conv workload)';
  const rows = [
    { setup: 'quotaring sharded', mode: 'sharded', nodes: 3, rps: 10421.6 },
    { setup: 'quotaring central', mode: 'central-store', nodes: 3, rps: 6012 },
    { setup: 'quotaring sharded', mode: 'sharded', nodes: 1, rps: 3843.4 },
    { setup: 'quotaring central', mode: 'central-store', nodes: 1, rps: 2511.5 },
    { setup: 'simulator direct', mode: 'direct', nodes: 0, rps: 9120.4 },
    { setup: 'quotaring sharded', mode: 'sharded', nodes: 2, rps: 7020 },
  ] as const;

  test('bars grouped by node count, coloured by mode, each labelled with its rounded req/s', async (t) => {
    const [svg, ms] = await timed(() => throughputChart(rows, title));
    keep(t, 'throughput', svg, ms);
    assertDocument(svg, title);
    assert.deepEqual(texts(svg, 'axis-title'), ['cluster size (gateway nodes)', 'throughput (req/s)']);
    // nodes-0 rows first under their setup name, then node counts ascending whatever the input order.
    assert.deepEqual(texts(svg, 'axis-label').slice(0, 4), ['simulator direct', '1 node', '2 nodes', '3 nodes']);
    assert.deepEqual(texts(svg, 'legend-label'), ['sharded', 'central-store', 'direct']);
    assert.deepEqual(texts(svg, 'legend-title'), ['mode']);
    assert.deepEqual(texts(svg, 'mark'), ['10422', '6012', '3843', '2512', '9120', '7020']);

    // Each label is centred over its own bar, its baseline 5 px above the bar's top (dy 3 px, plus
    // the 0.2 × 10 px font that vega's SVG renderer shifts a bottom-baseline text up by).
    const bars = [...svg.matchAll(/<path aria-label="([^"]*)" role="graphics-symbol" aria-roledescription="bar" d="M([\d.]+),([\d.]+)h([\d.]+)v/g)];
    const labels = [...svg.matchAll(/<text aria-label="([^"]*); label: (\d+)"[^>]*transform="translate\(([\d.]+),([\d.]+)\)"/g)];
    assert.equal(bars.length, 6);
    assert.equal(labels.length, 6);
    for (const [, key, text, lx, ly] of labels) {
      const bar = bars.find((b) => b[1] === key);
      assert.ok(bar, `a bar for ${key}`);
      const [, , bx, by, bw] = bar;
      assert.ok(Math.abs(Number(bx) + Number(bw) / 2 - Number(lx)) < 1e-6, `${text} centred`);
      assert.ok(Math.abs(Number(by) - 5 - Number(ly)) < 1e-6, `${text} above its bar`);
    }
  });

  test('a reference row (nodes 0) is its own group named by its setup', async () => {
    const svg = await throughputChart([{ setup: 'rate-limiter-flexible + redis', mode: 'reference', nodes: 0, rps: 1500 }], 'Reference only');
    assert.deepEqual(texts(svg, 'axis-label')[0], 'rate-limiter-flexible + redis');
    assert.deepEqual(texts(svg, 'axis-title'), ['cluster size (gateway nodes)', 'throughput (req/s)']);
    assert.deepEqual(texts(svg, 'mark'), ['1500']);
  });

  test('long setup names are wrapped onto lines at spaces and hyphens, not cut', async () => {
    const name = 'rate-limiter-flexible + redis';
    const svg = await throughputChart([...rows, { setup: name, mode: 'reference', nodes: 0, rps: 1500 }], title);
    // 5 groups in a 610 px plot: 116 px per label line, 13 characters at 0.8 × 11 px.
    assert.match(svg, />rate-limiter-<\/tspan><tspan[^>]*>flexible \+<\/tspan><tspan[^>]*>redis<\/tspan>/);
    assert.deepEqual(texts(svg, 'axis-label').slice(0, 5), ['simulator direct', name, '1 node', '2 nodes', '3 nodes']);
    assert.ok(!svg.includes('…'), 'no label is truncated');
  });

  test('rejects empty input, duplicate bars and bad numbers with a RangeError', async () => {
    await assert.rejects(throughputChart([], title), { name: 'RangeError', message: /^throughputChart: no rows to plot/ });
    await assert.rejects(throughputChart([rows[0], { ...rows[0], setup: 'again' }], title), {
      name: 'RangeError',
      message: 'throughputChart: two rows for group "3 nodes" and mode "sharded"; each bar needs exactly one row',
    });
    await assert.rejects(throughputChart([{ ...rows[0], rps: Number.NaN }], title), { name: 'RangeError', message: /rps .* must be a finite number >= 0, got NaN/ });
    await assert.rejects(throughputChart([{ ...rows[0], nodes: 1.5 }], title), { name: 'RangeError', message: /must be an integer, got 1.5/ });
  });
});

describe('latencyCdfChart', () => {
  const title = 'Latency CDF, 3 nodes';
  const percentiles = [1, 2.5, 10, 25, 50, 75, 90, 97.5, 99, 99.9, 99.99, 99.999];
  // autocannon-style: the lowest percentiles of a fast setup report 0 ms.
  const direct = [0, 0, 0.1, 1, 1, 1, 2, 2, 3, 5, 9, 12];
  const sharded = [1, 1, 2, 2, 3, 4, 5, 7, 9, 15, 40, 61];
  const central = [2, 2, 3, 4, 6, 8, 11, 15, 19, 33, 80, 120];
  const series = [
    { name: 'simulator direct', points: percentiles.map((p, i) => ({ percentile: p, ms: direct[i] ?? 0 })) },
    { name: 'sharded', points: percentiles.map((p, i) => ({ percentile: p, ms: sharded[i] ?? 0 })) },
    { name: 'central-store', points: percentiles.map((p, i) => ({ percentile: p, ms: central[i] ?? 0 })) },
  ];

  test('one line per series on a log ms axis, fraction of requests on y, 0 ms clamped to 0.1 ms', async (t) => {
    const [svg, ms] = await timed(() => latencyCdfChart(series, title));
    keep(t, 'latency-cdf', svg, ms);
    assertDocument(svg, title);
    assert.deepEqual(texts(svg, 'axis-title'), [
      'latency (ms, log scale; values below 0.1 ms drawn at 0.1)',
      'fraction of requests at or below (0–1)',
    ]);
    assert.deepEqual(texts(svg, 'legend-label'), ['simulator direct', 'sharded', 'central-store']);
    const lines = [...svg.matchAll(/aria-roledescription="line mark"/g)];
    assert.equal(lines.length, 3);

    const points = [...svg.matchAll(/<path aria-label="[^"]*setup: ([^;]+); fraction: ([\d.]+)" role="graphics-symbol" aria-roledescription="point" transform="translate\(([\d.]+),([\d.]+)\)"/g)].map(
      ([, name, fraction, x, y]) => ({ name, fraction: Number(fraction), x: Number(x), y: Number(y) }),
    );
    assert.equal(points.length, 36);
    const at = (name: string, fraction: number) => points.find((p) => p.name === name && p.fraction === fraction);
    // y is percentile / 100 on a 0..1 scale of a 320 px plot: p50 at 160, p1 at 316.8.
    assert.equal(at('sharded', 0.5)?.y, 160);
    assert.equal(at('sharded', 0.01)?.y, 316.8);
    // The 0 ms points (p1, p2.5) are drawn where the 0.1 ms point (p10) is.
    const x01 = at('simulator direct', 0.1)?.x;
    assert.equal(typeof x01, 'number');
    assert.equal(at('simulator direct', 0.01)?.x, x01);
    assert.equal(at('simulator direct', 0.025)?.x, x01);
    assert.ok((at('sharded', 0.01)?.x ?? 0) > (x01 ?? Infinity), '1 ms is right of 0.1 ms');
  });

  test('rejects empty input, an empty series and a percentile above 100 with a RangeError', async () => {
    await assert.rejects(latencyCdfChart([], title), { name: 'RangeError', message: /^latencyCdfChart: no series to plot/ });
    await assert.rejects(latencyCdfChart([{ name: 'x', points: [] }], title), { name: 'RangeError', message: 'latencyCdfChart: series "x" has no points' });
    await assert.rejects(latencyCdfChart([{ name: 'x', points: [{ percentile: 101, ms: 1 }] }], title), { name: 'RangeError', message: /must be <= 100, got 101/ });
    await assert.rejects(latencyCdfChart([{ name: 'x', points: [{ percentile: 50, ms: -1 }] }], title), { name: 'RangeError', message: /ms in "x" must be a finite number >= 0, got -1/ });
  });
});

describe('tenantMinuteChart', () => {
  const title = 'Admitted tokens per tenant per minute';
  const limits: Record<string, number> = { alice: 20000, bob: 8000 };
  function rows(panels: readonly string[]) {
    return panels.flatMap((panel) =>
      ['alice', 'bob'].flatMap((tenant) =>
        [0, 1, 2, 3, 4].map((minute) => ({
          panel,
          tenant,
          minute,
          admittedTokens: Math.round((limits[tenant] ?? 0) * (0.8 + 0.05 * minute)),
          limitTokens: limits[tenant] ?? 0,
        })),
      ),
    );
  }
  const panels = ['conv 1× sharded', 'conv 1× central', 'burst sharded', 'burst central', 'mixed sharded'];

  test('one panel per facet, a line per tenant, the limit as a dashed line in the same colour', async (t) => {
    const [svg, ms] = await timed(() => tenantMinuteChart(rows(panels), title));
    keep(t, 'tenant-minute', svg, ms);
    assertDocument(svg, title);
    assert.deepEqual(texts(svg, 'title-text'), [...panels, title]);
    assert.deepEqual(texts(svg, 'legend-label'), ['alice', 'bob']);
    assert.deepEqual(texts(svg, 'legend-title'), ['tenant (solid: admitted, dashed: limit)']);
    const axisTitles = texts(svg, 'axis-title');
    assert.equal(axisTitles.filter((a) => a === 'time (minute)').length, 5);
    assert.equal(axisTitles.filter((a) => a === 'tokens per minute').length, 5);

    const lines = [...svg.matchAll(/<path aria-label="[^"]*dashed: limit\): (\w+)" role="graphics-symbol" aria-roledescription="line mark" d="([^"]*)" stroke="([^"]*)"([^>]*)>/g)];
    assert.equal(lines.length, 20); // 5 panels × 2 tenants × (admitted, limit)
    const dashed = lines.filter((l) => (l[4] ?? '').includes('stroke-dasharray="6,4"'));
    assert.equal(dashed.length, 10);
    for (const tenant of ['alice', 'bob']) {
      const strokes = new Set(lines.filter((l) => l[1] === tenant).map((l) => l[3]));
      assert.equal(strokes.size, 1, `${tenant}: admitted and limit share one colour`);
    }
    for (const [, tenant, d] of dashed) {
      const ys = new Set([...(d ?? '').matchAll(/[ML][\d.]+,([\d.]+)/g)].map((m) => m[1]));
      assert.equal(ys.size, 1, `${tenant}'s limit line is horizontal: ${d}`);
    }
  });

  test('at most 4 panels per row', async () => {
    const one = size(await tenantMinuteChart(rows(panels.slice(0, 1)), title));
    const four = size(await tenantMinuteChart(rows(panels.slice(0, 4)), title));
    const five = size(await tenantMinuteChart(rows(panels), title));
    assert.equal(four.height, one.height);
    assert.ok(five.height > four.height + 150, `a second row: ${four.height} -> ${five.height}`);
    assert.equal(five.width, four.width);
  });

  test('rejects empty input and duplicate minutes with a RangeError', async () => {
    await assert.rejects(tenantMinuteChart([], title), { name: 'RangeError', message: /^tenantMinuteChart: no rows to plot/ });
    const [first] = rows(panels.slice(0, 1));
    assert.ok(first);
    await assert.rejects(tenantMinuteChart([first, first], title), { name: 'RangeError', message: 'tenantMinuteChart: two rows for "conv 1× sharded" / "alice" minute 0' });
  });
});

test('renderSvg renders any vega-lite spec', async () => {
  const svg = await renderSvg({ data: { values: [{ a: 1 }] }, mark: 'point', encoding: { x: { field: 'a', type: 'quantitative' } } });
  assert.ok(svg.startsWith('<svg'));
  assert.equal([...svg.matchAll(/aria-roledescription="point"/g)].length, 1);
});

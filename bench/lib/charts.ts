/**
 * Chart renderer for the comparison benchmark (`npm run bench`, issue 5): throughput by node count
 * and mode, latency CDF by mode, and admitted tokens per tenant per minute against the limit.
 *
 * Each chart is a vega-lite spec compiled to vega and rendered headless (`renderer: 'none'`, no
 * canvas) to a standalone SVG string with a white background, a title and axis titles with units,
 * laid out for about 720 px of width. Inputs are validated up front: an empty input, a non-finite
 * number or an ambiguous row throws a RangeError naming the chart and the offending value, so a
 * broken benchmark run fails loudly instead of producing a blank or misleading picture.
 */
import { parse, View } from 'vega';
import { compile } from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';

/** Target overall width of every chart in px (plot area plus axes and legend). */
const TOTAL_WIDTH = 720;

/** Compact y labels (2k, 1.5M); d3 would print the zero tick as "0k" under a shared prefix. */
const COMPACT_AXIS = { format: '~s', labelExpr: "datum.value === 0 ? '0' : datum.label" } as const;


const CONFIG = {
  background: 'white',
  font: 'Helvetica, Arial, sans-serif',
  padding: 12,
  title: { fontSize: 15, anchor: 'start', offset: 12 },
  axis: { labelFontSize: 11, titleFontSize: 12, titlePadding: 8 },
  legend: { labelFontSize: 11, titleFontSize: 12, labelLimit: 320, titleLimit: 400 },
  header: { labelFontSize: 12, labelFontWeight: 'bold' },
} as const;

/** Compiles a vega-lite spec and renders it to a standalone SVG document. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const vgSpec = compile(spec).spec;
  const view = new View(parse(vgSpec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

function requireFinite(chart: string, what: string, value: number, min = -Infinity): void {
  if (!Number.isFinite(value) || value < min) {
    throw new RangeError(`${chart}: ${what} must be a finite number${min > -Infinity ? ` >= ${min}` : ''}, got ${value}`);
  }
}

function nodesLabel(nodes: number): string {
  return nodes === 1 ? '1 node' : `${nodes} nodes`;
}

/**
 * Greedy word wrap to lines of at most `max` characters, breaking at spaces and after hyphens
 * ("rate-limiter-flexible" -> "rate-limiter-" / "flexible"); a longer piece gets a line of its own.
 */
function wrapWords(text: string, max: number): string {
  const lines: string[] = [];
  for (const [w, word] of text.split(' ').entries()) {
    for (const [p, piece] of word.split(/(?<=-)/).entries()) {
      const last = lines.at(-1);
      const joined = last === undefined ? piece : `${last}${w > 0 && p === 0 ? ' ' : ''}${piece}`;
      if (last !== undefined && joined.length <= max) lines[lines.length - 1] = joined;
      else lines.push(piece);
    }
  }
  return lines.join('\n');
}

export interface ThroughputRow {
  setup: string;
  mode: string;
  nodes: number;
  rps: number;
}

/**
 * Grouped bars: one group per node count ("1 node", "2 nodes", ...), one bar per mode, y = req/s,
 * each bar labelled with its rounded value. Rows with `nodes: 0` (a simulator-direct run, a
 * reference) form their own group named by `setup`, placed before the node-count groups in input
 * order; node-count groups follow in ascending order.
 */
export async function throughputChart(rows: readonly ThroughputRow[], title: string): Promise<string> {
  const chart = 'throughputChart';
  if (rows.length === 0) throw new RangeError(`${chart}: no rows to plot (expected at least one {setup, mode, nodes, rps})`);
  const seen = new Set<string>();
  const data = rows.map((r) => {
    requireFinite(chart, `nodes of "${r.setup}"`, r.nodes, 0);
    if (!Number.isInteger(r.nodes)) throw new RangeError(`${chart}: nodes of "${r.setup}" must be an integer, got ${r.nodes}`);
    requireFinite(chart, `rps of "${r.setup}" (${r.mode})`, r.rps, 0);
    const group = r.nodes === 0 ? r.setup : nodesLabel(r.nodes);
    const key = `${group}\u0000${r.mode}`;
    if (seen.has(key)) throw new RangeError(`${chart}: two rows for group "${group}" and mode "${r.mode}"; each bar needs exactly one row`);
    seen.add(key);
    return { group, mode: r.mode, rps: r.rps, label: String(Math.round(r.rps)) };
  });
  const references = [...new Set(rows.filter((r) => r.nodes === 0).map((r) => r.setup))];
  const counts = [...new Set(rows.filter((r) => r.nodes > 0).map((r) => r.nodes))].sort((a, b) => a - b).map(nodesLabel);
  const groupOrder = [...references, ...counts];
  const modeOrder = [...new Set(rows.map((r) => r.mode))];
  // Long setup names are wrapped onto lines that fit a group's band (headless vega estimates text
  // at 0.8 × font size per character): `labelExpr` splits the label at the newlines put in here.
  const plotWidth = TOTAL_WIDTH - 110;
  const band = Math.floor(plotWidth / groupOrder.length) - 6;
  const lineChars = Math.max(6, Math.floor(band / (0.8 * CONFIG.axis.labelFontSize)));
  const wrapped = new Map(groupOrder.map((g) => [g, wrapWords(g, lineChars)]));
  for (const d of data) d.group = wrapped.get(d.group) ?? d.group;

  const x = {
    field: 'group',
    type: 'nominal',
    sort: groupOrder.map((g) => wrapped.get(g) ?? g),
    title: 'cluster size (gateway nodes)',
    axis: { labelAngle: 0, labelLimit: band, labelExpr: "split(datum.label, '\\n')" },
  } as const;
  const xOffset = { field: 'mode', type: 'nominal', sort: modeOrder } as const;
  const y = { field: 'rps', type: 'quantitative', title: 'throughput (req/s)', axis: COMPACT_AXIS } as const;
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: plotWidth,
    height: 320,
    config: CONFIG,
    data: { values: data },
    layer: [
      {
        mark: { type: 'bar' },
        encoding: {
          x,
          xOffset,
          y,
          color: { field: 'mode', type: 'nominal', sort: modeOrder, title: 'mode', legend: { orient: 'bottom', direction: 'horizontal' } },
        },
      },
      {
        mark: { type: 'text', baseline: 'bottom', dy: -3, fontSize: 10, color: '#333' },
        encoding: { x, xOffset, y, text: { field: 'label', type: 'nominal' } },
      },
    ],
  };
  return renderSvg(spec);
}

export interface LatencySeries {
  name: string;
  points: readonly { percentile: number; ms: number }[];
}

/** Latencies at or below this are drawn at it: a log scale has no 0 (autocannon reports 0 ms for sub-ms requests at low percentiles). */
const MIN_LOG_MS = 0.1;

/**
 * Latency CDF: one line per series, x = latency in ms on a log scale, y = fraction of requests at
 * or below that latency (percentile / 100). Points are plotted as given, ordered by percentile.
 */
export async function latencyCdfChart(series: readonly LatencySeries[], title: string): Promise<string> {
  const chart = 'latencyCdfChart';
  if (series.length === 0) throw new RangeError(`${chart}: no series to plot (expected at least one {name, points})`);
  const names = new Set<string>();
  const data = series.flatMap((s) => {
    if (names.has(s.name)) throw new RangeError(`${chart}: series name "${s.name}" appears twice`);
    names.add(s.name);
    if (s.points.length === 0) throw new RangeError(`${chart}: series "${s.name}" has no points`);
    return s.points.map((p) => {
      requireFinite(chart, `percentile in "${s.name}"`, p.percentile, 0);
      if (p.percentile > 100) throw new RangeError(`${chart}: percentile in "${s.name}" must be <= 100, got ${p.percentile}`);
      requireFinite(chart, `ms in "${s.name}"`, p.ms, 0);
      // Clamp to MIN_LOG_MS: log(0) is undefined, and 0 ms really means "under the 1 ms resolution".
      return { series: s.name, fraction: p.percentile / 100, ms: Math.max(p.ms, MIN_LOG_MS) };
    });
  });
  const order = series.map((s) => s.name);
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: TOTAL_WIDTH - 90,
    height: 320,
    config: CONFIG,
    data: { values: data },
    mark: { type: 'line', point: { size: 24 } },
    encoding: {
      x: {
        field: 'ms',
        type: 'quantitative',
        scale: { type: 'log' },
        title: `latency (ms, log scale; values below ${MIN_LOG_MS} ms drawn at ${MIN_LOG_MS})`,
        axis: { format: '~g' },
      },
      y: {
        field: 'fraction',
        type: 'quantitative',
        scale: { domain: [0, 1] },
        title: 'fraction of requests at or below (0–1)',
      },
      color: {
        field: 'series',
        type: 'nominal',
        sort: order,
        title: 'setup',
        legend: { orient: 'bottom', direction: 'horizontal', columns: Math.min(order.length, 3) },
      },
      order: { field: 'fraction', type: 'quantitative' },
    },
  };
  return renderSvg(spec);
}

export interface TenantMinuteRow {
  panel: string;
  tenant: string;
  minute: number;
  admittedTokens: number;
  limitTokens: number;
}

const MAX_FACET_COLUMNS = 4;

/**
 * Small multiples, one facet per `panel` (in input order, at most 4 per row): per tenant a solid
 * line of admitted tokens per minute and a dashed line of the limit in the same colour (a horizontal
 * rule when the limit is constant, which it is in the benchmark; a step if it ever changes).
 * Each panel has its own y scale.
 */
export async function tenantMinuteChart(rows: readonly TenantMinuteRow[], title: string): Promise<string> {
  const chart = 'tenantMinuteChart';
  if (rows.length === 0) throw new RangeError(`${chart}: no rows to plot (expected at least one {panel, tenant, minute, admittedTokens, limitTokens})`);
  const seen = new Set<string>();
  for (const r of rows) {
    const where = `"${r.panel}" / "${r.tenant}"`;
    requireFinite(chart, `minute in ${where}`, r.minute);
    requireFinite(chart, `admittedTokens in ${where}`, r.admittedTokens, 0);
    requireFinite(chart, `limitTokens in ${where}`, r.limitTokens, 0);
    const key = `${r.panel}\u0000${r.tenant}\u0000${r.minute}`;
    if (seen.has(key)) throw new RangeError(`${chart}: two rows for ${where} minute ${r.minute}`);
    seen.add(key);
  }
  const panels = [...new Set(rows.map((r) => r.panel))];
  const tenants = [...new Set(rows.map((r) => r.tenant))];
  const columns = Math.min(panels.length, MAX_FACET_COLUMNS);
  // Per cell: its own y axis (~66 px with compact labels and title) and 12 px spacing; 24 px padding.
  // Headless vega has no canvas to measure text and estimates 0.8 × font size per character, so
  // panel names (bold 12 px) are allowed up to the cell plus the next cell's axis before they are
  // cut: names up to ~17 characters show in full at 4 columns.
  const cellWidth = Math.floor((TOTAL_WIDTH - 24) / columns) - 90;

  const x = { field: 'minute', type: 'quantitative', title: 'time (minute)', axis: { tickMinStep: 1, format: 'd' } } as const;
  const color = { field: 'tenant', type: 'nominal', sort: tenants, title: 'tenant (solid: admitted, dashed: limit)', legend: { orient: 'bottom', direction: 'horizontal' } } as const;
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    // A panel name wider than its cell would push the grid apart: cut it (with an ellipsis) instead.
    config: { ...CONFIG, facet: { spacing: 12 }, header: { ...CONFIG.header, labelLimit: cellWidth + 80 } },
    data: { values: rows.map((r) => ({ ...r })) },
    columns,
    facet: { field: 'panel', type: 'nominal', sort: panels, title: null },
    spec: {
      width: cellWidth,
      height: 150,
      layer: [
        {
          // Invisible: 8% headroom above each limit so the dashed line does not sit on the frame.
          transform: [{ calculate: 'datum.limitTokens * 1.08', as: 'headroom' }],
          mark: { type: 'point', opacity: 0, aria: false },
          encoding: { x, y: { field: 'headroom', type: 'quantitative', title: 'tokens per minute', axis: COMPACT_AXIS } },
        },
        {
          mark: { type: 'line', strokeDash: [6, 4], strokeWidth: 1.5, opacity: 0.9 },
          encoding: { x, y: { field: 'limitTokens', type: 'quantitative', title: 'tokens per minute', axis: COMPACT_AXIS }, color },
        },
        {
          mark: { type: 'line', point: { size: 16 }, strokeWidth: 2 },
          encoding: { x, y: { field: 'admittedTokens', type: 'quantitative', title: 'tokens per minute', axis: COMPACT_AXIS }, color },
        },
      ],
    },
    // Independent x axes too, so a panel in a short last row still gets its own time axis under it.
    resolve: { scale: { y: 'independent' }, axis: { x: 'independent' } },
  };
  return renderSvg(spec);
}

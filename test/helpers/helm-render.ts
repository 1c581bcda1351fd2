/**
 * A tiny renderer for the subset of Helm's Go templates that `deploy/helm/quotaring` uses, so the
 * chart can be rendered and validated without a Helm binary. The subset, and nothing more (anything
 * else throws, so the chart cannot drift into syntax this renderer would get wrong):
 *
 * - actions `{{ ... }}`, with `{{-` / `-}}` trimming the whitespace (newlines included) before / after;
 * - comments `{{/* ... *\/}}`;
 * - `if` / `else` / `end` on a pipeline (Go truthiness: false, 0, "", empty list or map, nil are false);
 * - pipelines `cmd | fn arg...`, where a command is a field (`.Values.a.b`, `.Release.Name`,
 *   `.Release.Namespace`, `.Chart.Name`, `.Chart.Version`, `.Chart.AppVersion`), a string literal, an
 *   integer, or a call of: `toYaml x`, `quote x`, `not x`, `required "message" x`, `nindent n x`, `indent n x`,
 *   `sha256sum x`, `.Files.Get "path"` (a file of the chart);
 * - printing a string, a boolean or an integer below 1e6 (Helm holds values as float64 and prints
 *   1e6 as `1e+06`: such numbers must go through `toYaml` or `quote`).
 *
 * Differences from Helm that do not change the rendered objects: `toYaml` sorts keys like Helm but
 * may quote scalars differently; a field missing from the values throws here (Helm prints
 * `<no value>` or fails with a nil pointer), so every value the templates read must be in values.yaml.
 * The golden render test pins this renderer's output.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';

/** What a template sees as `.`: `.Values`, `.Release`, `.Chart`. */
export interface RenderContext {
  readonly Values: unknown;
  readonly Release: { readonly Name: string; readonly Namespace: string };
  readonly Chart: { readonly Name: string; readonly Version: string; readonly AppVersion: string };
}

type Node = { kind: 'text'; text: string } | { kind: 'print'; pipeline: string } | { kind: 'if'; pipeline: string; then: Node[]; else: Node[] };

/** Splits a template into text and actions, applying `{{-` / `-}}` trimming. */
function tokens(source: string): { text: string; action: string | undefined }[] {
  const out: { text: string; action: string | undefined }[] = [];
  let rest = source;
  for (;;) {
    const open = rest.indexOf('{{');
    if (open < 0) {
      out.push({ text: rest, action: undefined });
      return out;
    }
    const close = rest.indexOf('}}', open);
    if (close < 0) throw new Error('unclosed {{');
    let text = rest.slice(0, open);
    let inner = rest.slice(open + 2, close);
    if (inner.startsWith('-')) {
      text = text.replace(/\s+$/, '');
      inner = inner.slice(1);
    }
    rest = rest.slice(close + 2);
    if (inner.endsWith('-')) {
      inner = inner.slice(0, -1);
      rest = rest.replace(/^\s+/, '');
    }
    out.push({ text, action: inner.trim() });
  }
}

function parseTemplate(source: string): Node[] {
  const root: Node[] = [];
  const stack: { nodes: Node[]; node?: Extract<Node, { kind: 'if' }>; inElse: boolean }[] = [{ nodes: root, inElse: false }];
  const top = () => stack[stack.length - 1] as (typeof stack)[number];
  for (const { text, action } of tokens(source)) {
    if (text !== '') top().nodes.push({ kind: 'text', text });
    if (action === undefined || (action.startsWith('/*') && action.endsWith('*/'))) continue;
    const [word] = action.split(/\s+/);
    if (word === 'if') {
      const node: Extract<Node, { kind: 'if' }> = { kind: 'if', pipeline: action.slice(2).trim(), then: [], else: [] };
      top().nodes.push(node);
      stack.push({ nodes: node.then, node, inElse: false });
    } else if (word === 'else') {
      const frame = top();
      if (frame.node === undefined || frame.inElse || action !== 'else') throw new Error(`unsupported or misplaced: {{ ${action} }}`);
      frame.nodes = frame.node.else;
      frame.inElse = true;
    } else if (word === 'end') {
      if (stack.length === 1) throw new Error('{{ end }} without {{ if }}');
      stack.pop();
    } else if (['range', 'with', 'define', 'template', 'include', 'block', 'tpl'].includes(word ?? '') || action.includes(':=')) {
      throw new Error(`not in the supported subset: {{ ${action} }}`);
    } else {
      top().nodes.push({ kind: 'print', pipeline: action });
    }
  }
  if (stack.length !== 1) throw new Error('{{ if }} without {{ end }}');
  return root;
}

/** Splits a command into words, keeping string literals whole. */
function words(command: string): string[] {
  const out: string[] = [];
  for (const m of command.matchAll(/"(?:[^"\\]|\\.)*"|\S+/g)) out.push(m[0]);
  return out;
}

function field(path: string, ctx: RenderContext): unknown {
  let value: unknown = ctx;
  for (const part of path.slice(1).split('.')) {
    if (value === null || typeof value !== 'object' || !(part in value)) throw new Error(`${path}: no such value`);
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function toYaml(value: unknown): string {
  return stringify(value, { sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, '');
}

function indentLines(n: number, s: string): string {
  const pad = ' '.repeat(n);
  return s
    .split('\n')
    .map((line) => pad + line)
    .join('\n');
}

function asString(value: unknown, what: string): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'boolean') return String(value);
  if (typeof value === 'number' && Number.isInteger(value) && Math.abs(value) < 1e6) return String(value);
  throw new Error(`${what}: cannot print ${JSON.stringify(value)} (use toYaml or quote)`);
}

function evalCommand(command: string, piped: { value: unknown } | undefined, ctx: RenderContext, chartDir: string): unknown {
  const [head, ...rawArgs] = words(command);
  if (head === undefined) throw new Error('empty command');
  const arg = (w: string): unknown => {
    if (w.startsWith('"')) return JSON.parse(w) as string;
    if (/^-?\d+$/.test(w)) return Number(w);
    if (w.startsWith('.')) return field(w, ctx);
    throw new Error(`unsupported argument ${w}`);
  };
  const args = rawArgs.map(arg);
  if (piped !== undefined) args.push(piped.value);
  const one = (): unknown => {
    if (args.length !== 1) throw new Error(`${head}: takes 1 argument`);
    return args[0];
  };
  switch (head) {
    case 'toYaml':
      return toYaml(one());
    case 'not':
      return !truthy(one());
    case 'quote':
      return JSON.stringify(asString(one(), command));
    case 'sha256sum':
      return createHash('sha256').update(asString(one(), command)).digest('hex');
    case 'required': {
      const [message, value] = args;
      if (value === undefined || value === null || value === '') throw new Error(`required: ${String(message)}`);
      return value;
    }
    case 'nindent':
    case 'indent': {
      const [n, value] = args;
      if (typeof n !== 'number') throw new Error(`${head}: a number first`);
      const s = indentLines(n, asString(value, command));
      return head === 'nindent' ? `\n${s}` : s;
    }
    case '.Files.Get': {
      const [path] = args;
      if (typeof path !== 'string' || path.includes('..')) throw new Error('.Files.Get: a path inside the chart');
      return readFileSync(join(chartDir, path), 'utf8');
    }
    default:
      if (rawArgs.length === 0 && piped === undefined) {
        if (head.startsWith('"') || /^-?\d+$/.test(head) || head.startsWith('.')) return arg(head);
      }
      throw new Error(`not in the supported subset: ${command}`);
  }
}

function evalPipeline(pipeline: string, ctx: RenderContext, chartDir: string): unknown {
  let piped: { value: unknown } | undefined;
  for (const command of pipeline.split(/\|(?=(?:[^"]*"[^"]*")*[^"]*$)/)) piped = { value: evalCommand(command.trim(), piped, ctx, chartDir) };
  return piped?.value;
}

function truthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === 0 || value === '') return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

function renderNodes(nodes: readonly Node[], ctx: RenderContext, chartDir: string): string {
  let out = '';
  for (const node of nodes) {
    if (node.kind === 'text') out += node.text;
    else if (node.kind === 'print') out += asString(evalPipeline(node.pipeline, ctx, chartDir), node.pipeline);
    else out += renderNodes(truthy(evalPipeline(node.pipeline, ctx, chartDir)) ? node.then : node.else, ctx, chartDir);
  }
  return out;
}

/** One rendered template file. */
export interface RenderedFile {
  /** `templates/<file>` */
  readonly name: string;
  readonly text: string;
}

/**
 * Renders every `templates/*.yaml` of a chart (sorted by name) with `values.yaml` deep-merged with
 * `overrides` (maps merge, anything else replaces; `null` deletes, as `helm --set x=null`).
 * @throws Error naming the template for anything outside the subset, a missing value or a `required` one left empty.
 */
export function renderChart(chartDir: string, overrides: unknown, release: RenderContext['Release']): RenderedFile[] {
  const chart = parse(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8')) as { name: string; version: string; appVersion: string };
  const values = merge(parse(readFileSync(join(chartDir, 'values.yaml'), 'utf8')), overrides);
  const ctx: RenderContext = { Values: values, Release: release, Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion } };
  const files = readdirSync(join(chartDir, 'templates'))
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  return files.map((f) => {
    const name = `templates/${f}`;
    try {
      return { name, text: renderNodes(parseTemplate(readFileSync(join(chartDir, name), 'utf8')), ctx, chartDir) };
    } catch (err) {
      throw new Error(`${name}: ${(err as Error).message}`);
    }
  });
}

/** The objects of rendered files, as `helm template` would output them: YAML documents, empty ones dropped. */
export function renderedObjects(files: readonly RenderedFile[]): { source: string; object: Record<string, unknown> }[] {
  const out: { source: string; object: Record<string, unknown> }[] = [];
  for (const file of files) {
    for (const doc of file.text.split(/^---\s*$/m)) {
      const object = parse(doc) as unknown;
      if (object === null || object === undefined) continue;
      if (typeof object !== 'object' || Array.isArray(object)) throw new Error(`${file.name}: a document that is not an object`);
      out.push({ source: file.name, object: object as Record<string, unknown> });
    }
  }
  return out;
}

function merge(base: unknown, over: unknown): unknown {
  if (over === undefined) return base;
  if (base !== null && typeof base === 'object' && !Array.isArray(base) && over !== null && typeof over === 'object' && !Array.isArray(over)) {
    const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
    for (const [k, v] of Object.entries(over)) {
      if (v === null) delete out[k];
      else out[k] = merge(out[k], v);
    }
    return out;
  }
  return over;
}

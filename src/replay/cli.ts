/**
 * `quotaring replay`: replays a request trace against a gateway and prints the report.
 * The main CLI adds it with `program.addCommand(replayCommand())`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { EncodingName } from '../tokens/index.ts';
import { runReplay } from './replay.ts';
import type { ReplayOptions } from './replay.ts';
import { formatReport } from './report.ts';
import { ZipfAssigner } from './tenants.ts';
import { readTrace } from './trace.ts';
import type { TraceSelection } from './trace.ts';

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be an integer >= 1');
  return n;
}

function nonNegative(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a number >= 0');
  return n;
}

function speedOf(value: string): number {
  if (value === 'max') return Infinity;
  const n = Number(value);
  if (value.trim() === '' || !(n > 0)) throw new InvalidArgumentError('must be a number > 0, or "max"');
  return n;
}

/** `--keys`: `key` or `label=key` entries; a label stands for its key in the report (keys are never printed then). */
function keysOf(value: string): { keys: string[]; labels: Map<string, string> } {
  const labels = new Map<string, string>();
  const keys = value
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '')
    .map((entry) => {
      const eq = entry.indexOf('=');
      if (eq <= 0) return entry;
      const key = entry.slice(eq + 1);
      labels.set(key, entry.slice(0, eq));
      return key;
    });
  if (keys.length === 0) throw new InvalidArgumentError('give at least one key');
  if (new Set(keys).size !== keys.length) throw new InvalidArgumentError('keys must be distinct');
  return { keys, labels };
}

function urlOf(value: string): string {
  try {
    const url = new URL(value);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new InvalidArgumentError('must be an http(s) URL');
  }
  return value;
}

/** Parsed options of `quotaring replay`. */
interface ReplayCliOptions {
  trace: string;
  target: string;
  keys: { keys: string[]; labels: Map<string, string> };
  speed: number;
  limit?: number;
  from?: number;
  to?: number;
  concurrency: number;
  zipf: number;
  seed: number;
  model: string;
  encoding?: EncodingName;
  maxTokens?: number;
  simulator?: string;
  out?: string;
  json?: boolean;
  progress?: boolean;
}

/**
 * The `replay` command (commander 14): reads the trace, replays it with {@link runReplay}, prints the
 * report as a table (or JSON with `--json`) on stdout. Ctrl-C stops the replay and still prints the
 * report of what was sent. Exit code 1 on a bad trace or option.
 */
export function replayCommand(): Command {
  return new Command('replay')
    .description('replay a request trace (TIMESTAMP,ContextTokens,GeneratedTokens CSV, plain or .gz) against a gateway and report admission per tenant per minute')
    .requiredOption('--trace <file>', 'trace CSV or CSV.gz, e.g. cluster/traces/azure-llm-2023-conv.csv.gz')
    .requiredOption('--target <url>', 'gateway base URL, e.g. http://127.0.0.1:8080', urlOf)
    .requiredOption('--keys <k1,k2,...>', 'tenant API keys, hottest first (Zipf rank order); label=key shows the label instead of the key in the report', keysOf)
    .option('--speed <x>', 'time compression: 1 = real time, 10 = ten times faster, "max" = no waiting', speedOf, 1)
    .option('--limit <n>', 'replay at most n rows', positiveInt)
    .option('--from <s>', 'start at this many seconds into the trace', nonNegative)
    .option('--to <s>', 'stop at this many seconds into the trace', nonNegative)
    .option('--concurrency <n>', 'most requests in flight', positiveInt, 256)
    .option('--zipf <s>', 'Zipf exponent of the tenant draw (0 = uniform)', nonNegative, 1.1)
    .option('--seed <n>', 'seed of the tenant draw', (v: string) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('must be a non-negative integer');
      return n;
    }, 42)
    .option('--model <name>', 'model sent in each request', 'gpt-4o-mini')
    .addOption(new Option('--encoding <name>', 'tokenizer for the prompts (default: the model\'s)').choices(['cl100k_base', 'o200k_base']))
    .option('--max-tokens <n>', 'fixed max_tokens for every request (default: each row\'s GeneratedTokens)', positiveInt)
    .option('--simulator <url>', 'provider simulator base URL, to count upstream 429s from GET /sim/stats', urlOf)
    .option('--out <file>', 'write one JSON record per request (JSONL)')
    .option('--json', 'print the report as JSON instead of a table')
    .option('--progress', 'draw a progress bar on stderr even when it is not a terminal')
    .option('--no-progress', 'never draw a progress bar')
    .action(async (opts: ReplayCliOptions) => {
      const controller = new AbortController();
      const stop = (): void => {
        process.stderr.write('\nstopping: no new requests, cancelling those in flight\n');
        controller.abort();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      try {
        const selection: TraceSelection = {
          ...(opts.from === undefined ? {} : { fromMs: opts.from * 1_000 }),
          ...(opts.to === undefined ? {} : { toMs: opts.to * 1_000 }),
          ...(opts.limit === undefined ? {} : { limit: opts.limit }),
        };
        const rows = await readTrace(opts.trace, selection);
        if (rows.length === 0) throw new Error(`no rows of ${opts.trace} in the selection`);
        const rule = new ZipfAssigner(opts.keys.keys, { s: opts.zipf, seed: opts.seed }).rule;
        const lastMs = (rows.at(-1)?.atMs ?? 0) - (rows[0]?.atMs ?? 0);
        process.stderr.write(`replaying ${rows.length} rows (${(lastMs / 1_000).toFixed(1)} s of trace) of ${opts.trace} at speed ${opts.speed} against ${opts.target}; tenants: ${rule}\n`);
        const replayOpts: ReplayOptions = {
          rows,
          target: opts.target,
          keys: opts.keys.keys,
          labels: opts.keys.labels,
          speed: opts.speed,
          concurrency: opts.concurrency,
          zipf: opts.zipf,
          seed: opts.seed,
          model: opts.model,
          signal: controller.signal,
          ...(opts.encoding === undefined ? {} : { encoding: opts.encoding }),
          ...(opts.maxTokens === undefined ? {} : { maxTokens: opts.maxTokens }),
          ...(opts.simulator === undefined ? {} : { simulator: opts.simulator }),
          ...(opts.out === undefined ? {} : { out: opts.out }),
          ...(opts.progress === undefined ? {} : { progress: opts.progress }),
        };
        const report = await runReplay(replayOpts);
        process.stdout.write(opts.json === true ? `${JSON.stringify(report, null, 2)}\n` : `${formatReport(report)}\n`);
      } catch (err) {
        process.stderr.write(`error: ${(err as Error).message}\n`);
        process.exitCode = 1;
      } finally {
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }
    });
}

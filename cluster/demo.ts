/**
 * `npm start` / `quotaring demo`: the provider simulator and one gateway node with the demo config,
 * no provider key needed. Prints how to call it and runs until Ctrl-C.
 */
import { fileURLToPath } from 'node:url';
import { launch } from './launcher.ts';

/** Options of {@link runDemo}. */
export interface DemoOptions {
  /** @default cluster/demo.yaml */
  readonly config?: string;
  /** Gateway port (must match the config's). @default 8080 */
  readonly port?: number;
  /** Simulator port (must match the deployments' base_url). @default 9090 */
  readonly simulatorPort?: number;
}

/** Demo config shipped with the package. */
export function demoConfigPath(): string {
  return fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './demo.yaml' : '../../cluster/demo.yaml', import.meta.url));
}

/** Starts the demo and resolves with the exit code when it stops. */
export async function runDemo(opts: DemoOptions = {}): Promise<number> {
  const config = opts.config ?? demoConfigPath();
  const port = opts.port ?? 8080;
  const simPort = opts.simulatorPort ?? 9090;
  const env = { QUOTARING_SIM_KEY: 'sim-demo-key' };
  const group = await launch(
    [
      { name: 'simulator', args: ['simulate', '--port', String(simPort), '--tps', '200', '--ttft-ms', '150'], env, healthUrl: `http://127.0.0.1:${simPort}/sim/stats` },
      { name: 'node', args: ['node', '--config', config, '--port', String(port)], env, healthUrl: `http://127.0.0.1:${port}/readyz` },
    ],
    { handleSignals: true },
  );
  const base = `http://127.0.0.1:${port}`;
  process.stdout.write(`
quotaring demo is up: a gateway node on ${base}, the provider simulator on http://127.0.0.1:${simPort}
Tenants (cluster/demo.yaml): alice (key qr-demo-alice: 60 req/min, 20k tokens/min, 4 concurrent)
                             bob   (key qr-demo-bob: 600 req/min, 100k tokens/min, 1M tokens/day, 20 concurrent)

  curl -s ${base}/v1/chat/completions -H 'Authorization: Bearer qr-demo-alice' \\
    -H 'Content-Type: application/json' \\
    -d '{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"Hello"}]}' -i

  Or with the OpenAI SDK: new OpenAI({ baseURL: '${base}/v1', apiKey: 'qr-demo-alice' })
  Anthropic SDK:          new Anthropic({ baseURL: '${base}', apiKey: 'qr-demo-alice' }) with model claude-sonnet-5
Press Ctrl-C to stop.
`);
  return group.done;
}

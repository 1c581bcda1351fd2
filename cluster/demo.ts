/**
 * The demo config shipped with the package (`cluster/demo.yaml`): two tenants in front of the
 * provider simulator, no provider key needed. `npm start` runs it as a local cluster
 * (`quotaring up`); `quotaring demo` is `quotaring up --nodes 1`.
 */
import { fileURLToPath } from 'node:url';

/** Absolute path of `cluster/demo.yaml`, from the TypeScript sources or from the build (`dist/cluster/`). */
export function demoConfigPath(): string {
  return fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './demo.yaml' : '../../cluster/demo.yaml', import.meta.url));
}

/** A demo tenant as the banner shows it. */
export interface DemoTenant {
  readonly id: string;
  /** Its API key (a demo key, not a secret). */
  readonly key: string;
  /** Its limits in words, as configured in demo.yaml. */
  readonly limits: string;
}

/** The tenants of demo.yaml, for the banner (a unit test of the config pins the file itself). */
export const DEMO_TENANTS: readonly DemoTenant[] = [
  { id: 'alice', key: 'qr-demo-alice', limits: '60 req/min, 20k tokens/min, 4 concurrent' },
  { id: 'bob', key: 'qr-demo-bob', limits: '600 req/min, 100k tokens/min, 1M tokens/day, 20 concurrent (priority batch)' },
];

/** Models of demo.yaml used in the banner's examples: one on an OpenAI deployment, one on an Anthropic one. */
export const DEMO_MODELS = { openai: 'gpt-4o-mini', anthropic: 'claude-sonnet-5' } as const;

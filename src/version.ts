/**
 * The package's version (`quotaring --version`), read from the `package.json` next to the sources
 * (`src/` under tsx) or to the build (`dist/src/`).
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * The `version` field of quotaring's own `package.json`.
 * @throws Error when no package.json with a version is found above this file.
 */
export function packageVersion(): string {
  for (const up of ['../package.json', '../../package.json']) {
    const path = fileURLToPath(new URL(up, import.meta.url));
    if (!existsSync(path)) continue;
    const pkg = JSON.parse(readFileSync(path, 'utf8')) as { name?: unknown; version?: unknown };
    if (pkg.name === 'quotaring' && typeof pkg.version === 'string') return pkg.version;
  }
  throw new Error('quotaring: package.json not found next to the sources');
}

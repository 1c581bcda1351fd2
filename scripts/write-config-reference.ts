/**
 * Writes the table of every config key, generated from `src/config/schema.ts`, into
 * `docs/configuration.md` between its markers (`npm run docs:config`). `test/unit/config-reference.test.ts`
 * fails when the file is not what this writes.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { withConfigKeys } from '../src/config/reference.ts';

const file = fileURLToPath(new URL('../docs/configuration.md', import.meta.url));
writeFileSync(file, withConfigKeys(readFileSync(file, 'utf8')));
process.stdout.write(`${file}: config keys written\n`);

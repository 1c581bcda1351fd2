/**
 * Static members given on the command line: `--members node-1=http://127.0.0.1:8101,node-2=http://127.0.0.1:8102`.
 */
import { MemberSchema } from '../../config/schema.ts';
import type { Member } from '../types.ts';

/**
 * Parses `id=url[,id=url...]` (an optional `*weight` after the URL: `node-2=http://h:8102*2`).
 * @returns the members, in the order given.
 * @throws Error naming the bad entry: not `id=url`, an id or URL the config schema refuses, a
 *   weight that is not a positive integer, or an id given twice.
 */
export function parseMemberList(text: string): Member[] {
  const members: Member[] = [];
  const seen = new Set<string>();
  for (const entry of text.split(',').map((e) => e.trim()).filter((e) => e !== '')) {
    const eq = entry.indexOf('=');
    if (eq <= 0) throw new Error(`--members: "${entry}" is not id=url`);
    const id = entry.slice(0, eq);
    let url = entry.slice(eq + 1);
    let weight: number | undefined;
    const star = url.lastIndexOf('*');
    if (star >= 0) {
      weight = Number(url.slice(star + 1));
      url = url.slice(0, star);
    }
    const parsed = MemberSchema.safeParse(weight === undefined ? { id, url } : { id, url, weight });
    if (!parsed.success) throw new Error(`--members: "${entry}": ${parsed.error.issues.map((i) => i.message).join('; ')}`);
    if (seen.has(id)) throw new Error(`--members: "${id}" appears twice`);
    seen.add(id);
    members.push({ id: parsed.data.id, url: parsed.data.url, ...(parsed.data.weight === undefined ? {} : { weight: parsed.data.weight }) });
  }
  if (members.length === 0) throw new Error('--members: no member given');
  return members;
}

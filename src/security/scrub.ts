/**
 * Scrubs secrets out of what an upstream provider sends back before it is relayed to a tenant:
 * error bodies (JSON or text), error events inside SSE streams, and response headers. An upstream
 * that echoes the key it received (a misconfigured proxy, a verbose error page) must not hand the
 * deployment's provider key to a tenant.
 *
 * What is replaced by `[redacted]`:
 * - the literal values of the secrets the scrubber was built with (the deployments' provider keys),
 *   also in their JSON-escaped and percent-encoded spellings;
 * - anything shaped like a credential: `Bearer <token>`, `Basic <base64>`, OpenAI/Anthropic-style
 *   keys (`sk-…`, `sk-ant-…`, `sk_…`), AWS access key ids (`AKIA…`, `ASIA…`), Google API keys
 *   (`AIza…`), GitHub and Slack tokens, JWTs, the password of a URL (`scheme://user:pw@host`), the
 *   value after `api-key`/`x-api-key`/`authorization`/`password` and a `:` or `=`, and long
 *   base64/hex values after `key`, `token`, `secret`, `signature`, `credential` (`key=…`, `"token": "…"`);
 * - in a JSON body, every string value of a property named like a credential (`api_key`,
 *   `authorization`, `token`, `secret`, `password`, ...), whatever its shape.
 *
 * Linear time: every pattern starts with a literal (or a fixed class) and has no two adjacent
 * quantifiers over overlapping characters, so a failed match scans at most to the end of one run
 * of the characters it accepts, and runs never overlap for one start literal. A unit test scrubs
 * 1 MB adversarial bodies. JSON stays JSON: a JSON body is parsed, its strings scrubbed and
 * re-serialised (only when something changed; otherwise the exact text is kept).
 */
import type { SseEvent } from '../providers/sse.ts';

/** What a secret is replaced with. Contains no character that needs escaping in JSON or SSE. */
export const REDACTED = '[redacted]';

/**
 * Shortest secret scrubbed by its literal value, characters. A shorter configured key (test and
 * demo setups) would match ordinary words; credential-shaped values are still scrubbed by pattern.
 */
export const MIN_LITERAL_SECRET = 6;

/** One credential shape: the pattern and how a match is rewritten (`$n` groups kept). */
export interface Shape {
  readonly pattern: RegExp;
  readonly replace: string;
}

/**
 * Value characters of the named-value shapes: no whitespace, quote, backslash or JSON/HTML/query
 * delimiter, so a replacement never crosses the end of a JSON string or an SSE line.
 */
const VALUE = `[^\\s"'\\\\,;&<>{}\\[\\]]`;

/** Credential shapes, applied in this order (earlier ones leave `[redacted]`, which later ones skip). Exported for tests. */
export const SHAPES: readonly Shape[] = [
  // scheme://user:password@host: the password.
  { pattern: /:\/\/([^\s/:@"'\\]*):([^\s/@"'\\]+)@/g, replace: `://$1:${REDACTED}@` },
  // RFC 6750 b64token after Bearer (any case), base64 after Basic.
  { pattern: /\b(bearer\s+)[A-Za-z0-9\-._~+/]{8,}=*/gi, replace: `$1${REDACTED}` },
  { pattern: /\b(Basic\s+)[A-Za-z0-9+/]{12,}=*/g, replace: `$1${REDACTED}` },
  // Provider key shapes.
  { pattern: /\bsk[-_][A-Za-z0-9_-]{16,}/g, replace: REDACTED },
  { pattern: /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/g, replace: REDACTED },
  { pattern: /\bAIza[0-9A-Za-z_-]{35}/g, replace: REDACTED },
  { pattern: /\bgh[pousr]_[A-Za-z0-9]{30,}/g, replace: REDACTED },
  { pattern: /\bxox[abprs]-[A-Za-z0-9-]{10,}/g, replace: REDACTED },
  { pattern: /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, replace: REDACTED },
  // Named values: `x-api-key: v`, `api_key=v`, `"password": "v"`, `authorization: v` (not a scheme already handled).
  {
    pattern: new RegExp(`(api[-_]?key|authorization|password|passwd)(["']?\\s*[:=]\\s*["']?)(?!bearer\\s|basic\\s|\\[redacted\\])${VALUE}{6,}`, 'gi'),
    replace: `$1$2${REDACTED}`,
  },
  // Long base64/hex after key/token/secret/...: `key=AbC…`, `access_token: "…"`, `client_secret=…`.
  { pattern: /(key|token|secret|signature|credential)(["']?\s*[:=]\s*["']?)[A-Za-z0-9+/_\-.~]{16,}=*/gi, replace: `$1$2${REDACTED}` },
];

/**
 * A text none of whose substrings is one of these (any case) matches no shape in {@link SHAPES}:
 * each shape's match starts with or contains one of them. One scan instead of one per shape, for
 * the usual header value or message that holds nothing credential-like. Exported for tests (which
 * check the claim against every shape).
 */
export const MAY_HOLD_CREDENTIAL = /:\/\/|bearer|basic|sk[-_]|akia|asia|aiza|gh[pousr]_|xox|eyj|authorization|passw|key|token|secret|signature|credential/i;

/** JSON property names whose string values are credentials, whatever they look like. */
const SECRET_PROPERTY = /^(?:x-)?(?:api[-_]?key|authorization|proxy-authorization|(?:access|refresh|auth|id|session|bearer)?[-_]?token|(?:client[-_]?)?secret|password|passwd|credentials?)$/i;

/** Response headers never relayed: credentials have no business in a provider's reply. */
const CREDENTIAL_HEADER = /^(?:authorization|proxy-authorization|x-api-key|api-key|cookie)$/i;

/** A JSON value as `JSON.parse` returns it. */
type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/**
 * Scrubs one deployment set's secrets and every credential shape from relayed upstream content.
 * Stateless after construction; share one per config.
 */
export class SecretScrubber {
  /** Literal spellings to replace, longest first (a key that contains another is replaced whole). */
  readonly #literals: readonly string[];

  /**
   * @param secrets values to remove wherever they appear (provider keys); undefined, empty and
   *   values shorter than {@link MIN_LITERAL_SECRET} are skipped.
   */
  constructor(secrets: Iterable<string | undefined>) {
    const spellings = new Set<string>();
    for (const s of secrets) {
      if (s === undefined || s.length < MIN_LITERAL_SECRET) continue;
      spellings.add(s);
      spellings.add(JSON.stringify(s).slice(1, -1));
      spellings.add(encodeURIComponent(s));
    }
    this.#literals = [...spellings].sort((a, b) => b.length - a.length);
  }

  /**
   * Scrubs free text (a line, a header value, a message). Never turns a JSON string's content into
   * something that ends the string: replacements never consume `"` or `\`. O(n) in the length.
   */
  text(text: string): string {
    let out = text;
    for (const literal of this.#literals) if (out.includes(literal)) out = out.split(literal).join(REDACTED);
    if (!MAY_HOLD_CREDENTIAL.test(out)) return out;
    for (const shape of SHAPES) out = out.replace(shape.pattern, shape.replace);
    return out;
  }

  /**
   * Scrubs an upstream reply body. A JSON body stays valid JSON: it is parsed, its strings (and
   * property names) scrubbed, credential-named properties' string values replaced whole, and it
   * is re-serialised only when something changed. Anything else is scrubbed as text.
   */
  body(text: string): string {
    const start = text.trimStart()[0];
    if (start !== '{' && start !== '[' && start !== '"') return this.text(text);
    let parsed: Json;
    try {
      parsed = JSON.parse(text) as Json;
    } catch {
      return this.text(text);
    }
    const scrubbed = this.#json(parsed);
    if (!scrubbed.changed) return text;
    try {
      return JSON.stringify(scrubbed.value);
    } catch {
      // Too deep for JSON.stringify (a RangeError): the text scrub keeps JSON valid on its own
      // (it never touches quotes or backslashes); an error body this odd loses nothing by a
      // fixed replacement if that ever failed.
      const fallback = this.text(text);
      return isJson(fallback) ? fallback : JSON.stringify({ error: { message: REDACTED } });
    }
  }

  /**
   * The event with its data scrubbed as {@link body}, when it is an error event (`event: error`,
   * or data naming an `"error"`); other events (model output) are returned as they are.
   */
  event(event: SseEvent): SseEvent {
    if (event.event !== 'error' && !event.data.includes('"error"')) return event;
    const data = this.body(event.data);
    if (data === event.data) return event;
    const raw = `${event.event === '' ? '' : `event: ${event.event}\n`}${data
      .split('\n')
      .map((line) => `data: ${line}`)
      .join('\n')}\n\n`;
    return { raw, event: event.event, data };
  }

  /** Scrubs relayed header values in place and drops credential headers (`authorization`, `x-api-key`, `cookie`, ...). */
  headers(headers: Record<string, string>): void {
    for (const [name, value] of Object.entries(headers)) {
      if (CREDENTIAL_HEADER.test(name)) delete headers[name];
      else headers[name] = this.text(value);
    }
  }

  /** Scrubs a parsed JSON value without recursion (any depth). */
  #json(root: Json): { value: Json; changed: boolean } {
    let changed = false;
    const scrubString = (s: string): string => {
      const out = this.text(s);
      if (out !== s) changed = true;
      return out;
    };
    if (typeof root === 'string') return { value: scrubString(root), changed };
    const stack: (Json[] | { [key: string]: Json })[] = [];
    if (root !== null && typeof root === 'object') stack.push(root);
    while (stack.length > 0) {
      const node = stack.pop() as Json[] | { [key: string]: Json };
      if (Array.isArray(node)) {
        for (let i = 0; i < node.length; i++) {
          const v = node[i] as Json;
          if (typeof v === 'string') node[i] = scrubString(v);
          else if (v !== null && typeof v === 'object') stack.push(v);
        }
        continue;
      }
      for (const key of Object.keys(node)) {
        const v = node[key] as Json;
        let next: Json = v;
        if (typeof v === 'string') {
          if (SECRET_PROPERTY.test(key) && v !== '' && v !== REDACTED) {
            next = REDACTED;
            changed = true;
          } else next = scrubString(v);
        } else if (v !== null && typeof v === 'object') stack.push(v);
        const name = scrubString(key);
        if (name === key && next === v) continue;
        if (name !== key) delete node[key];
        // defineProperty: a `__proto__` key of parsed JSON is an own property, not the prototype.
        Object.defineProperty(node, name, { value: next, enumerable: true, writable: true, configurable: true });
      }
    }
    return { value: root, changed };
  }
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

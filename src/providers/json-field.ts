/**
 * Reads one top-level object field from a JSON text without parsing the whole text: providers put
 * `usage` last in a reply, so the gateway parses only that small object. An unescaped `"usage":`
 * cannot occur inside a JSON string (quotes there are escaped), so the last one is a key.
 */

/**
 * The value of the last `"<field>":` object in `text`, parsed; falls back to parsing the whole
 * text when the field is not an object at that place.
 * @returns the parsed value, or undefined when the text is not JSON or has no such field.
 */
export function jsonField(text: string, field: string): unknown {
  const key = `"${field}":`;
  const at = text.lastIndexOf(key);
  if (at >= 0) {
    let i = at + key.length;
    while (text.charCodeAt(i) === 32 || text.charCodeAt(i) === 10 || text.charCodeAt(i) === 13 || text.charCodeAt(i) === 9) i++;
    if (text.charCodeAt(i) === 123 /* { */) {
      let depth = 0;
      let inString = false;
      for (let j = i; j < text.length; j++) {
        const c = text.charCodeAt(j);
        if (inString) {
          if (c === 92 /* \ */) j++;
          else if (c === 34 /* " */) inString = false;
        } else if (c === 34) inString = true;
        else if (c === 123) depth++;
        else if (c === 125 /* } */ && --depth === 0) {
          try {
            return JSON.parse(text.slice(i, j + 1));
          } catch {
            break;
          }
        }
      }
    }
  }
  try {
    const whole: unknown = JSON.parse(text);
    return whole !== null && typeof whole === 'object' ? (whole as Record<string, unknown>)[field] : undefined;
  } catch {
    return undefined;
  }
}

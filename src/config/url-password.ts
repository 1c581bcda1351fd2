/** Whether a URL carries a password: the schema refuses one written in the config file. */

/** Whether `url` carries a password (`redis://user:pw@host`, `redis://:pw@host`); false for a string that is no URL. */
export function hasPassword(url: string): boolean {
  try {
    return new URL(url).password !== '';
  } catch {
    return false;
  }
}

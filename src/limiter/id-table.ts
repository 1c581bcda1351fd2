/**
 * A map from request id to `V` tuned for the common case of one entry: the first entry lives
 * in two fields, a `Map` is allocated only when a second entry arrives. Most tenants have at
 * most one request in flight, so this saves a `Map` (≈150 bytes) per tenant and its
 * allocation on the hot path.
 */
export class IdTable<V> {
  #soloId: string | null = null;
  #solo: V | undefined = undefined;
  #map: Map<string, V> | null = null;

  /** Number of entries. */
  get size(): number {
    return (this.#soloId === null ? 0 : 1) + (this.#map === null ? 0 : this.#map.size);
  }

  /** The value of `id`, or undefined. */
  get(id: string): V | undefined {
    if (this.#soloId === id) return this.#solo;
    return this.#map === null ? undefined : this.#map.get(id);
  }

  /** True when `id` has an entry. */
  has(id: string): boolean {
    return this.#soloId === id || (this.#map !== null && this.#map.has(id));
  }

  /** Sets `id` to `value` (replacing its value when present). */
  set(id: string, value: V): void {
    if (this.#soloId === id || (this.#soloId === null && (this.#map === null || !this.#map.has(id)))) {
      this.#soloId = id;
      this.#solo = value;
      return;
    }
    (this.#map ??= new Map()).set(id, value);
  }

  /** Removes `id`. @returns whether it was present. */
  delete(id: string): boolean {
    if (this.#soloId === id) {
      this.#soloId = null;
      this.#solo = undefined;
      return true;
    }
    if (this.#map === null || !this.#map.delete(id)) return false;
    if (this.#map.size === 0) this.#map = null;
    return true;
  }

  /** Calls `fn` for every entry (the inline one first, then in insertion order). O(size). */
  forEach(fn: (value: V, id: string) => void): void {
    if (this.#soloId !== null) fn(this.#solo as V, this.#soloId);
    if (this.#map !== null) for (const [id, v] of this.#map) fn(v, id);
  }

  /** Calls `fn` for every entry; removes the entries for which it returns true. O(size). */
  removeWhere(fn: (value: V, id: string) => boolean): void {
    if (this.#soloId !== null && fn(this.#solo as V, this.#soloId)) {
      this.#soloId = null;
      this.#solo = undefined;
    }
    const map = this.#map;
    if (map === null) return;
    for (const [id, v] of map) if (fn(v, id)) map.delete(id);
    if (map.size === 0) this.#map = null;
  }
}

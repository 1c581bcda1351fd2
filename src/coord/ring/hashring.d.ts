/** Minimal types of the `hashring` package (3.x) as quotaring uses it. */
declare module 'hashring' {
  type Servers = string | string[] | Record<string, { weight?: number; vnodes?: number }>;
  interface HashRingOptions {
    'vnode count'?: number;
    'max cache size'?: number;
    compatibility?: string;
    replicas?: number;
    'default port'?: number;
  }
  class HashRing {
    constructor(servers?: Servers, algorithm?: string, options?: HashRingOptions);
    get(key: string): string;
    range(key: string, size?: number, unique?: boolean): string[];
    add(servers: Servers): this;
    remove(server: string): this;
    has(server: string): boolean;
    reset(): this;
    end(): this;
  }
  export = HashRing;
}

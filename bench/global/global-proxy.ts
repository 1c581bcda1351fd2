/**
 * A TCP proxy in front of Redis for `npm run bench:global`: it can delay every chunk the client
 * sends by a fixed number of ms (Redis made slow), drop every byte while keeping the connections
 * open (Redis frozen, like SIGSTOP), or close every connection and refuse new ones (Redis down).
 */
import { connect, createServer } from 'node:net';
import type { Server, Socket } from 'node:net';

/** What the proxy does with traffic. */
export type ProxyMode = 'forward' | 'frozen' | 'down';

/** A proxy from 127.0.0.1:`port` to a Redis server. Backpressure is ignored (benchmark traffic is small). */
export class ChunkDelayProxy {
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #delayMs: number;
  #mode: ProxyMode = 'forward';

  private constructor(server: Server, delayMs: number) {
    this.#server = server;
    this.#delayMs = delayMs;
  }

  /**
   * Listens on a free port of 127.0.0.1 and forwards to `target`.
   * @param delayMs each chunk from the client reaches Redis this many ms later (0: at once); chunks
   *   keep their order (timers of one duration fire in creation order). Replies are not delayed, so
   *   a round trip gains about `delayMs` (setTimeout's granularity adds a little).
   */
  static async start(target: { readonly host: string; readonly port: number }, delayMs: number): Promise<ChunkDelayProxy> {
    const server = createServer();
    const proxy = new ChunkDelayProxy(server, delayMs);
    server.on('connection', (client: Socket) => proxy.#accept(client, target));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  /** The port the proxy listens on. */
  get port(): number {
    const address = this.#server.address();
    if (typeof address !== 'object' || address === null) throw new Error('proxy is not listening');
    return address.port;
  }

  /** `redis://127.0.0.1:<port>` */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Drops every byte in both directions from now on; connections stay open (a frozen Redis). */
  freeze(): void {
    this.#mode = 'frozen';
  }

  /** Closes every connection and stops listening: connects are refused (ECONNREFUSED), like a Redis that is down. */
  async down(): Promise<void> {
    this.#mode = 'down';
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  /** Same as `down`; idempotent. */
  async close(): Promise<void> {
    if (this.#mode === 'down' && !this.#server.listening) return;
    await this.down();
  }

  #accept(client: Socket, target: { readonly host: string; readonly port: number }): void {
    if (this.#mode === 'down') {
      client.destroy();
      return;
    }
    const upstream = connect(target.port, target.host);
    this.#sockets.add(client);
    this.#sockets.add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      this.#sockets.delete(client);
      this.#sockets.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.on('data', (chunk: Buffer) => {
      if (this.#mode !== 'forward') return;
      if (this.#delayMs <= 0) upstream.write(chunk);
      else setTimeout(() => this.#mode === 'forward' && !upstream.destroyed && upstream.write(chunk), this.#delayMs);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (this.#mode === 'forward' && !client.destroyed) client.write(chunk);
    });
  }
}

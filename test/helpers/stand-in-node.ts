/**
 * A stand-in gateway node for router tests, and the router's log lines: a plain HTTP server that
 * records each request it read to its end and answers with the test's handler.
 */
import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import type { Member } from '../../src/coord/types.ts';

/** A request the stand-in read: method, URL, headers and body length (bytes). */
export interface SeenRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly bytes: number;
}

/** A stand-in node (member id `n`): records each request once its body ended, then calls `handle` (default: 200 `{}`). */
export class StandInNode {
  handle: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('{}');
  readonly seen: SeenRequest[] = [];
  /** Connections accepted so far. */
  connections = 0;
  readonly server: Server = createServer((req, res) => {
    let bytes = 0;
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.once('end', () => {
      this.seen.push({ method: req.method as string, url: req.url as string, headers: req.headers, bytes });
      this.handle(req, res);
    });
  });
  member!: Member;

  /** Listens on a free port of 127.0.0.1. */
  async start(): Promise<this> {
    this.server.on('connection', () => this.connections++);
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.member = { id: 'n', url: `http://127.0.0.1:${(this.server.address() as AddressInfo).port}` };
    return this;
  }

  /** Closes every connection and the server. */
  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

/** The JSON log lines a router writes to `stream` (pass it as `logStream`). */
export class LogLines {
  readonly stream = new PassThrough();
  readonly all: string[] = [];

  constructor() {
    let rest = '';
    this.stream.on('data', (chunk: Buffer) => {
      const parts = (rest + chunk.toString('utf8')).split('\n');
      rest = parts.pop() ?? '';
      this.all.push(...parts.filter((l) => l !== ''));
    });
  }

  /** The `request` lines (one per request answered), parsed. */
  get requests(): Record<string, unknown>[] {
    return this.all.filter((l) => l.includes('"msg":"request"')).map((l) => JSON.parse(l) as Record<string, unknown>);
  }

  /** The lines since `from`, without what differs between two requests (time, reqId, pid, hostname, ms, a stack), as written (field order kept). */
  since(from: number): string[] {
    return this.all
      .slice(from)
      .map((l) => l.replace(/"time":\d+,/, '').replace(/"pid":\d+,"hostname":"[^"]*",/, '').replace(/"reqId":"req-[0-9a-z]+"/, '"reqId":"req-?"').replace(/"ms":[\d.]+/, '"ms":0').replace(/"stack":"(?:[^"\\]|\\.)*"/, '"stack":""'));
  }
}

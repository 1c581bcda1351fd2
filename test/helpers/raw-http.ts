/**
 * Raw HTTP for hostile-input tests: bytes no client library would send as they are.
 */
import { connect } from 'node:net';

/**
 * Sends `payload` as is to `url`'s host and port and reads the answer's head: its status (0 when
 * the server closed or stayed silent for 10 s) and its `x-quotaring-error` code.
 */
export function rawStatus(url: string, payload: string): Promise<{ status: number; code: string | undefined }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    let data = '';
    const done = (): void => {
      socket.destroy();
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(data)?.[1] ?? 0), code: /\r\nx-quotaring-error: ([^\r]+)/i.exec(data)?.[1] });
    };
    socket.setTimeout(10_000, done);
    socket.on('data', (d: Buffer) => {
      data += d.toString('latin1');
      if (data.includes('\r\n\r\n')) done();
    });
    socket.on('error', done);
    socket.on('close', done);
    socket.write(payload);
  });
}

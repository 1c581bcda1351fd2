/**
 * Width and height of an image in base64 (a data URL or raw base64), read from the file header
 * (PNG, GIF, JPEG, WebP) without decoding the image. Base64 is decoded only where the header is:
 * 4 characters hold 3 bytes, so byte `i` is found without decoding what comes before it, and a
 * JPEG's segments are skipped by reading 4 bytes each.
 */

/** Pixel size of an image. */
export interface ImageSize {
  readonly width: number;
  readonly height: number;
}

/** Random access to the bytes of a base64 string (no whitespace inside). */
class Base64Bytes {
  readonly #b64: string;
  readonly #start: number;
  /** Decoded length in bytes. */
  readonly length: number;

  constructor(b64: string, start: number) {
    this.#b64 = b64;
    this.#start = start;
    let end = b64.length;
    while (end > start && b64.charCodeAt(end - 1) === 61 /* = */) end--;
    this.length = Math.floor(((end - start) * 3) / 4);
  }

  /** Bytes [offset, offset + n), fewer at the end of the data. */
  read(offset: number, n: number): Buffer {
    const first = Math.floor(offset / 3);
    const last = Math.ceil((offset + n) / 3);
    const chunk = this.#b64.slice(this.#start + first * 4, this.#start + last * 4);
    return Buffer.from(chunk, 'base64').subarray(offset - first * 3, offset - first * 3 + n);
  }
}

function jpegSize(data: Base64Bytes): ImageSize | undefined {
  let i = 2;
  // Walk the segments: FF <marker> <length:u16 incl. itself> … until a start-of-frame marker.
  for (let guard = 0; guard < 10_000 && i + 9 <= data.length; guard++) {
    const head = data.read(i, 9);
    if (head[0] !== 0xff) return undefined;
    const marker = head[1] ?? 0;
    if (marker === 0xff) {
      i += 1; // fill byte
      continue;
    }
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
      i += 2; // stand-alone markers carry no length
      continue;
    }
    // SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) are not frames.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { width: head.readUInt16BE(7), height: head.readUInt16BE(5) };
    }
    i += 2 + head.readUInt16BE(2);
  }
  return undefined;
}

function sizeOf(data: Base64Bytes): ImageSize | undefined {
  const b = data.read(0, 30);
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47) return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  if (b.length >= 10 && b.toString('latin1', 0, 3) === 'GIF') return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
  if (b.length >= 30 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') {
    const chunk = b.toString('latin1', 12, 16);
    if (chunk === 'VP8X') return { width: 1 + b.readUIntLE(24, 3), height: 1 + b.readUIntLE(27, 3) };
    if (chunk === 'VP8L') {
      const bits = b.readUInt32LE(21);
      return { width: 1 + (bits & 0x3fff), height: 1 + ((bits >>> 14) & 0x3fff) };
    }
    if (chunk === 'VP8 ') return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
    return undefined;
  }
  if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) return jpegSize(data);
  return undefined;
}

/**
 * Size of the image in a `data:<type>;base64,<data>` URL or in raw base64 data (Anthropic's
 * `source.data`).
 * @returns undefined when the format is not PNG/GIF/JPEG/WebP or the header is cut or malformed;
 *   never throws.
 */
export function imageSizeFromBase64(data: string): ImageSize | undefined {
  const start = data.startsWith('data:') ? data.indexOf(',') + 1 : 0;
  if (start === 0 && data.startsWith('data:')) return undefined;
  try {
    return sizeOf(new Base64Bytes(data, start));
  } catch {
    return undefined;
  }
}

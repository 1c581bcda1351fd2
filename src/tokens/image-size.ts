/**
 * Width and height of an image in a base64 data URL, read from the file header (PNG, GIF, JPEG,
 * WebP) without decoding the image. Only the first 64 KiB are decoded.
 */

/** Pixel size of an image. */
export interface ImageSize {
  readonly width: number;
  readonly height: number;
}

/** Size from the header bytes of a PNG, GIF, JPEG or WebP file; undefined when unknown. */
export function imageSizeFromBytes(b: Buffer): ImageSize | undefined {
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47) return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  if (b.length >= 10 && b.toString('latin1', 0, 3) === 'GIF') return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
  if (b.length >= 30 && b.toString('latin1', 0, 4) === 'RIFF' && b.toString('latin1', 8, 12) === 'WEBP') {
    const chunk = b.toString('latin1', 12, 16);
    if (chunk === 'VP8X') return { width: 1 + b.readUIntLE(24, 3), height: 1 + b.readUIntLE(27, 3) };
    if (chunk === 'VP8L') {
      const bits = b.readUInt32LE(21);
      return { width: 1 + (bits & 0x3fff), height: 1 + ((bits >> 14) & 0x3fff) };
    }
    if (chunk === 'VP8 ') return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
    return undefined;
  }
  if (b.length >= 4 && b[0] === 0xff && b[1] === 0xd8) {
    let i = 2;
    while (i + 9 < b.length) {
      if (b[i] !== 0xff) return undefined;
      const marker = b[i + 1] ?? 0;
      const length = b.readUInt16BE(i + 2);
      // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
        return { width: b.readUInt16BE(i + 7), height: b.readUInt16BE(i + 5) };
      }
      i += 2 + length;
    }
  }
  return undefined;
}

/** Size of the image in a `data:<type>;base64,<data>` URL, or of raw base64 data; undefined when unknown. */
export function imageSizeFromBase64(data: string): ImageSize | undefined {
  const comma = data.startsWith('data:') ? data.indexOf(',') : -1;
  const start = comma + 1;
  const head = data.slice(start, start + 87_384); // 64 KiB of bytes
  try {
    return imageSizeFromBytes(Buffer.from(head.slice(0, head.length - (head.length % 4)), 'base64'));
  } catch {
    return undefined;
  }
}

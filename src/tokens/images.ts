/**
 * Image token costs.
 * - OpenAI (vision guide, "Calculating costs"): `detail: low` costs 85 tokens; `high` (and `auto`)
 *   scales the image to fit in 2048 × 2048, then so its shortest side is 768 px, and costs
 *   85 + 170 per 512 px tile.
 * - Anthropic (vision docs): about width × height / 750 tokens, after scaling the image to fit a
 *   1568 px long edge and about 1.15 megapixels.
 */
import { imageSizeFromBase64 } from './image-size.ts';
import type { ImageSize } from './image-size.ts';

/** Size assumed for images whose size cannot be read (remote URLs): a 1024 × 1024 image, 765 tokens at high detail. */
export const ASSUMED_IMAGE_SIZE: ImageSize = { width: 1024, height: 1024 };

/** OpenAI tokens of an image of the given size. @param detail `low`, `high` or `auto` (counted as high). */
export function openAIImageTokens(size: ImageSize, detail: string | undefined): number {
  if (detail === 'low') return 85;
  let { width: w, height: h } = size;
  if (w <= 0 || h <= 0) return 85;
  if (w > 2048 || h > 2048) {
    const s = 2048 / Math.max(w, h);
    w *= s;
    h *= s;
  }
  const short = Math.min(w, h);
  if (short > 768) {
    const s = 768 / short;
    w *= s;
    h *= s;
  }
  return 85 + 170 * Math.ceil(w / 512) * Math.ceil(h / 512);
}

/** OpenAI tokens of an `image_url` part. */
export function openAIImageUrlTokens(url: string | undefined, detail: string | undefined): number {
  if (detail === 'low') return 85;
  const size = url !== undefined && url.startsWith('data:') ? imageSizeFromBase64(url) : undefined;
  return openAIImageTokens(size ?? ASSUMED_IMAGE_SIZE, detail);
}

/** Anthropic tokens of an image of the given size. */
export function anthropicImageTokens(size: ImageSize): number {
  let { width: w, height: h } = size;
  if (w <= 0 || h <= 0) return 0;
  const edge = Math.max(w, h);
  if (edge > 1568) {
    w = (w * 1568) / edge;
    h = (h * 1568) / edge;
  }
  const mp = w * h;
  if (mp > 1_150_000) {
    const s = Math.sqrt(1_150_000 / mp);
    w *= s;
    h *= s;
  }
  return Math.ceil((w * h) / 750);
}

/** Anthropic tokens of a base64 image block's data (assumed size when unreadable). */
export function anthropicImageDataTokens(data: string | undefined): number {
  return anthropicImageTokens((data === undefined ? undefined : imageSizeFromBase64(data)) ?? ASSUMED_IMAGE_SIZE);
}

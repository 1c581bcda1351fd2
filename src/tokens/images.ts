/**
 * Image token costs.
 * - OpenAI (vision guide, "Calculating costs"): `detail: low` costs 85 tokens; `high` (and `auto`)
 *   scales the image to fit in 2048 × 2048, then so its shortest side is 768 px, and costs
 *   85 + 170 per 512 px tile.
 * - Anthropic (vision docs, "Evaluate image size"): about width × height / 750 tokens. "If your
 *   image's long edge is more than 1568 pixels, or your image is more than ~1,600 tokens, it will
 *   first be scaled down, preserving aspect ratio": so at most 1,600 tokens (1.2 MP; the docs'
 *   table gives 1092 × 1092 ≈ 1,590, and they advise ≤ 1.15 MP). Models with a larger vision input
 *   (Opus 4.7: 2576 px) are counted with the same cap: an under-reservation that settlement corrects.
 */
import { imageSizeFromBase64 } from './image-size.ts';
import type { ImageSize } from './image-size.ts';

/**
 * Size assumed for images whose size cannot be read (remote URLs, unreadable headers): 1024 × 1024,
 * i.e. 765 tokens at OpenAI high detail and 1,399 at Anthropic. The gateway does not fetch URLs.
 */
export const ASSUMED_IMAGE_SIZE: ImageSize = { width: 1024, height: 1024 };

/**
 * OpenAI tokens of an image of the given size (tile rule of GPT-4o / GPT-4.1 / o-series vision;
 * the mini models that bill by 32 px patches are counted with it too).
 * @param detail `low` (85 tokens flat), `high`, `auto` or absent (both counted as high).
 */
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

/** OpenAI tokens of an `image_url` part: data URLs are sized from their header, other URLs get {@link ASSUMED_IMAGE_SIZE}. */
export function openAIImageUrlTokens(url: string | undefined, detail: string | undefined): number {
  if (detail === 'low') return 85;
  const size = url !== undefined && url.startsWith('data:') ? imageSizeFromBase64(url) : undefined;
  return openAIImageTokens(size ?? ASSUMED_IMAGE_SIZE, detail);
}

/** Most tokens an Anthropic image costs: larger images are scaled down to this. */
export const ANTHROPIC_MAX_IMAGE_TOKENS = 1_600;

/** Anthropic tokens of an image of the given size: ceil(w × h / 750) after the documented downscale. */
export function anthropicImageTokens(size: ImageSize): number {
  let { width: w, height: h } = size;
  if (w <= 0 || h <= 0) return 0;
  const edge = Math.max(w, h);
  if (edge > 1568) {
    w = (w * 1568) / edge;
    h = (h * 1568) / edge;
  }
  return Math.min(ANTHROPIC_MAX_IMAGE_TOKENS, Math.ceil((w * h) / 750));
}

/** Anthropic tokens of a base64 image block's data (assumed size when unreadable). */
export function anthropicImageDataTokens(data: string | undefined): number {
  return anthropicImageTokens((data === undefined ? undefined : imageSizeFromBase64(data)) ?? ASSUMED_IMAGE_SIZE);
}

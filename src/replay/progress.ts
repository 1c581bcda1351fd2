/**
 * The replay's progress bar (cli-progress) on stderr: requests done out of the total, with live
 * admitted / limited / error counts and an ETA.
 */
import cliProgress from 'cli-progress';
import type { ReplayRecord } from './report.ts';
import { isAdmitted, isLimited } from './report.ts';

/** Receives each finished request; `stop()` removes the bar. */
export interface ProgressSink {
  tick(record: ReplayRecord): void;
  stop(): void;
}

/** A sink that draws nothing. */
export const silentProgress: ProgressSink = { tick: () => undefined, stop: () => undefined };

/**
 * A progress bar on `stream` for `total` requests.
 * @param stream where to draw. @default process.stderr
 * @param force draw even when the stream is not a TTY (one plain line every 2 s). @default false
 */
export function progressBar(total: number, stream: NodeJS.WriteStream = process.stderr, force = false): ProgressSink {
  const bar = new cliProgress.SingleBar(
    {
      stream,
      noTTYOutput: force,
      notTTYSchedule: 2_000,
      hideCursor: true,
      fps: 5,
      format: 'replay [{bar}] {value}/{total} | admitted {admitted} limited {limited} errors {errors} | ETA {eta_formatted}',
    },
    cliProgress.Presets.shades_classic,
  );
  const counts = { admitted: 0, limited: 0, errors: 0 };
  bar.start(total, 0, counts);
  return {
    tick(record) {
      if (isAdmitted(record)) counts.admitted++;
      else if (isLimited(record)) counts.limited++;
      else counts.errors++;
      bar.increment(1, counts);
    },
    stop() {
      bar.stop();
    },
  };
}

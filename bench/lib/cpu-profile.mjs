// Preloaded with `--import` (NODE_OPTIONS refuses --cpu-prof): profiles the whole process with the
// inspector and writes <QUOTARING_CPU_PROFILE_DIR>/<pid>.cpuprofile when it exits (bench/router/router.ts, BENCH_PROFILE).
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import process from 'node:process';

const dir = process.env.QUOTARING_CPU_PROFILE_DIR ?? '.';
const session = new Session();
session.connect();
session.post('Profiler.enable');
session.post('Profiler.setSamplingInterval', { interval: 100 });
session.post('Profiler.start');
process.once('exit', () => {
  // Same-thread inspector sessions answer synchronously: the file is written before the process ends.
  session.post('Profiler.stop', (err, res) => {
    if (err === null) writeFileSync(`${dir}/${process.pid}.cpuprofile`, JSON.stringify(res.profile));
  });
});

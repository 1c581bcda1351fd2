#!/bin/sh
# Runs the fault e2e tests (cluster chaos, Redis restart, partitions) N times each, round-robin,
# while two busy-loop processes keep both cores of this machine busy (issue 13: "10 runs in 10
# while another process keeps both cores busy"). Prints one line per run and a tally.
#   sh scripts/loaded-runs.sh [N=10]     (after npm run build; the partition test needs root)
# QUOTARING_SOAK_FILES="test/e2e/x.test.ts ..." runs other files.
set -u
n=${1:-10}
cd "$(dirname "$0")/.."
node -e 'for (;;) {}' & b1=$!
node -e 'for (;;) {}' & b2=$!
trap 'kill $b1 $b2 2>/dev/null' EXIT INT TERM
files=${QUOTARING_SOAK_FILES:-"test/e2e/cluster-chaos.test.ts test/e2e/redis-restart.test.ts test/e2e/partition.test.ts"}
log=$(mktemp -d)
i=1
while [ "$i" -le "$n" ]; do
  for f in $files; do
    name=$(basename "$f" .test.ts)
    if node --import tsx --test --test-concurrency=1 "$f" > "$log/$name.$i.log" 2>&1; then r=pass; else r=FAIL; fi
    echo "round $i $name $r ($(uptime | sed 's/.*load average: //'))"
  done
  i=$((i + 1))
done
echo "logs: $log"
for f in $files; do
  name=$(basename "$f" .test.ts)
  echo "$name: $(grep -l '^# fail 0' "$log/$name".*.log 2>/dev/null | wc -l) passed of $(ls "$log/$name".*.log | wc -l)"
done

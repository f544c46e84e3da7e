#!/usr/bin/env bash
# Runs krteds against the real control loop at one size (small: CI; medium; large), building
# what it needs first (the integration suite's binaries, the scheduler and kwok: cached), and
# writes the figures to $KRTEDS_SCALE_REPORT (default: scale-<size>.md in the current folder).
#   test/scale/run.sh small|medium|large
# Fails (non-zero) on any violation of what must hold, and on a timeout.
set -euo pipefail
size="${1:-small}"
case "$size" in
  small) timeout=40m ;;
  medium) timeout=150m ;;
  large) timeout=300m ;;
  *) echo "usage: $0 small|medium|large" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bash "$root/test/envtest/build.sh"
bash "$here/build.sh"
export KRTEDS_SCALE_SIZE="$size"
export KRTEDS_SCALE_REPORT="${KRTEDS_SCALE_REPORT:-$PWD/scale-$size.md}"
echo "scale rig, $size: the report goes to $KRTEDS_SCALE_REPORT"
cd "$root"
# The rig and its processes need the machine's memory; the test binary watches nothing else.
status=0
go test -count=1 -timeout "$timeout" -run '^TestScale$' -v ./test/scale/ || status=$?
if [[ -s "$KRTEDS_SCALE_REPORT" ]]; then
  cat "$KRTEDS_SCALE_REPORT"
fi
if [[ $status -ne 0 ]]; then
  echo "scale rig, $size: FAILED (exit $status)" >&2
fi
exit $status

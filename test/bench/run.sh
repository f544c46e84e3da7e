#!/usr/bin/env bash
# Runs krteds' scale benchmark suite at one size (small, medium or large; default small).
#   test/bench/run.sh [SIZE] [COUNT]
# COUNT repeats each benchmark (for benchstat; default 1). Output is go test's benchmark format;
# the full output of every run is kept in $KRTEDS_BENCH_LOG (default: a temporary file).
# A benchmark that fails or times out makes the script fail with its output, and a run that
# prints no result for a benchmark fails too.
# Environment: KRTEDS_BENCH_PROTOCOL=delta|sotw (default delta), KRTEDS_BENCH_ROLLOUT_PACE
# (default 2ms), KRTEDS_BENCH_ENDPOINTS (endpoints per service, at most 64),
# KRTEDS_BENCH_FILES_LARGE=1 (also run the manifests-folder benchmarks at the large size),
# KRTEDS_HERD_PROXIES, KRTEDS_HERD_CLUSTERS, KRTEDS_HERD_BUDGET, KRTEDS_HERD_RESPONSE_BYTES,
# KRTEDS_HERD_STREAM_RATE, KRTEDS_HERD_MAX_RSS, KRTEDS_HERD_MAX_CLIENT_RSS (BenchmarkHerd).
set -euo pipefail
cd "$(dirname "$0")"
size="${1:-small}"
count="${2:-1}"
export KRTEDS_BENCH_SIZE="$size"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="${KRTEDS_BENCH_LOG:-$work/bench.log}"
: > "$log"
bin="$work/bench.test"
go test -c -o "$bin" .

# run NAME BENCHTIME [DIR BINARY]: runs one benchmark; fails loudly unless every run printed a result.
run() {
  local name="$1" benchtime="$2" b="${3:-$bin}" out="$work/out"
  if ! "$b" -test.run '^$' -test.bench "^$name\$" -test.benchtime "$benchtime" -test.count "$count" -test.timeout 60m >"$out" 2>&1; then
    cat "$out" >>"$log"
    echo "FAIL: $name (full output in $log)" >&2
    grep -E -- '--- FAIL|FAIL|panic|timed out|Error' "$out" | head -40 >&2 || true
    exit 1
  fi
  cat "$out" >>"$log"
  local results
  results=$(grep -cE "^$name([/-][^[:space:]]*)?[[:space:]]" "$out" || true)
  if [ "$results" -lt "$count" ]; then
    echo "FAIL: $name printed $results results, want $count (full output in $log)" >&2
    exit 1
  fi
  grep -E '^(goos|goarch|pkg|cpu):' "$out" | sort -u || true
  grep -E "^$name([/-][^[:space:]]*)?[[:space:]]" "$out"
}

run BenchmarkColdStart 1x
run BenchmarkEndpointFlip 200x
run BenchmarkGraphUpdate 500x
run BenchmarkRollout500 1x
run BenchmarkMemory 1x
run BenchmarkBudget 1x
# Every proxy connecting at once to krteds in a process of its own, each asking for every
# cluster (KRTEDS_HERD_PROXIES, KRTEDS_HERD_CLUSTERS change the shape).
run BenchmarkHerd 1x
# Four clusters of 250 services, and LEDS over one 5 000-endpoint service (their own sizes, whatever
# SIZE says): run once, with the small suite.
if [ "$size" = small ]; then
  run BenchmarkMultiCluster 200x
  run BenchmarkLEDSFlip 100x
fi
# The manifests folder as the source (the large folder, 100 000 pods, is not run by default).
if [ "$size" != large ] || [ -n "${KRTEDS_BENCH_FILES_LARGE:-}" ]; then
  run BenchmarkFilesColdStart 1x
  run BenchmarkFilesRenameFlip 50x
  run BenchmarkFilesRollout500 3x
  run BenchmarkFilesIdle 3x
fi
(cd ../../transforms/eds && go test -c -o "$work/eds.test" .)
run BenchmarkBuildAndMarshalCLA 50x "$work/eds.test"

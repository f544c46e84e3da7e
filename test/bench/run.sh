#!/usr/bin/env bash
# Runs krteds' scale benchmark suite at one size (small, medium or large; default small).
#   test/bench/run.sh [SIZE] [COUNT]
# COUNT repeats each benchmark (for benchstat; default 1). Output is go test's benchmark format.
# Environment: KRTEDS_BENCH_PROTOCOL=delta|sotw (default delta), KRTEDS_BENCH_ROLLOUT_PACE
# (default 2ms), KRTEDS_BENCH_ENDPOINTS (endpoints per service, at most 64).
set -euo pipefail
cd "$(dirname "$0")"
size="${1:-small}"
count="${2:-1}"
export KRTEDS_BENCH_SIZE="$size"
bin="$(mktemp -d)/bench.test"
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" .
run() { "$bin" -test.run '^$' -test.bench "^$1\$" -test.benchtime "$2" -test.count "$count" -test.timeout 60m | grep -E '^(Benchmark|goos|goarch|pkg|cpu)|ns/op'; }
run BenchmarkColdStart 1x
run BenchmarkEndpointFlip 200x
run BenchmarkGraphUpdate 500x
run BenchmarkRollout500 1x
run BenchmarkMemory 1x
(cd ../../transforms && go test -run '^$' -bench BuildAndMarshalCLA -benchtime 50x -count "$count" . | grep -E '^Benchmark')

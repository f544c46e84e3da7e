# The README's commands are the entry points; these are conveniences.
.PHONY: test bench bench-medium bench-large

test:
	go test ./...

# The scale benchmark suite at the small size (a few minutes); see docs/BENCHMARKS.md.
bench:
	test/bench/run.sh small

bench-medium:
	test/bench/run.sh medium

bench-large:
	test/bench/run.sh large

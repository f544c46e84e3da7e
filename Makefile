# The README's commands are the entry points; these are conveniences.
.PHONY: test bench bench-medium bench-large scale scale-medium scale-large build image docker-image manifests tools

VERSION ?= dev
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/krteds/krteds/outputs.Version=$(VERSION) -X github.com/krteds/krteds/outputs.Commit=$(COMMIT)

# A static binary with its version and commit (krteds version, /version, krteds_build_info).
build:
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o krteds ./cmd/krteds

# The image without a container daemon: an OCI layout archive, krteds-image.tar, built from a
# static binary by test/image (go-containerregistry) and checked (config, filesystem, and
# `krteds serve --demo` run from it); see "Deploying" in docs/OPERATING.md.
image:
	VERSION=$(VERSION) COMMIT=$(COMMIT) bash test/image/build.sh

# The same image with Docker, from the Dockerfile.
docker-image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t krteds:$(VERSION) .

test:
	go test ./...

# istioctl and helm, built from the modules pinned in test/tools (the integration suite runs them).
tools:
	bash test/tools/build.sh

# deploy/krteds.yaml from the Helm chart.
manifests: tools
	bash deploy/render.sh > deploy/krteds.yaml

# The scale benchmark suite at the small size (a few minutes); see docs/BENCHMARKS.md.
bench:
	test/bench/run.sh small

bench-medium:
	test/bench/run.sh medium

bench-large:
	test/bench/run.sh large

# The real control loop (API server, controllers, scheduler, kwok) with krteds as replicas; see
# docs/BENCHMARKS.md. small runs in CI (a few minutes), medium about half an hour.
scale:
	test/scale/run.sh small

scale-medium:
	test/scale/run.sh medium

scale-large:
	test/scale/run.sh large

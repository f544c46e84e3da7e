#!/usr/bin/env bash
# Builds krteds' container image without a container daemon, and checks it: a static krteds
# binary (as the Dockerfile builds it), made into an OCI image layout archive by krteds-image
# (this folder's Go module, go-containerregistry), built twice to prove the same binary gives the
# same digest, then read back and checked (config, filesystem, and `krteds serve --demo` run from
# it until /ready answers). Any difference fails it. `make image` and CI run it.
#
# VERSION (default dev) and COMMIT (default the checkout's HEAD) are stamped into the binary and
# the labels; the archive goes to ${KRTEDS_IMAGE:-<repo>/krteds-image.tar}. krteds-image itself is
# built once per version of its source into ~/.cache/krteds/image/<digest>/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
VERSION="${VERSION:-dev}"
COMMIT="${COMMIT:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)}"
out="${KRTEDS_IMAGE:-$repo/krteds-image.tar}"

digest="$(cd "$here" && cat go.mod go.sum $(ls ./*.go | grep -v '_test\.go$') | sha256sum | cut -c1-12)"
tooldir="$HOME/.cache/krteds/image/$digest"
tool="$tooldir/krteds-image"
if [[ ! -x "$tool" ]]; then
  echo "building krteds-image into $tooldir"
  mkdir -p "$tooldir"
  (cd "$here" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -o "$tool.tmp" . && mv "$tool.tmp" "$tool")
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "building krteds $VERSION ($COMMIT): static, as the Dockerfile builds it"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/krteds/krteds/outputs.Version=$VERSION -X github.com/krteds/krteds/outputs.Commit=$COMMIT" \
  -o "$work/krteds" ./cmd/krteds)

"$tool" build --binary "$work/krteds" --version "$VERSION" --revision "$COMMIT" --out "$out"
"$tool" build --binary "$work/krteds" --version "$VERSION" --revision "$COMMIT" --out "$work/again.tar" >/dev/null
if ! cmp -s "$out" "$work/again.tar"; then
  echo "two builds of the same binary differ: the image is not reproducible" >&2
  exit 1
fi
"$tool" check --image "$out" --version "$VERSION" --revision "$COMMIT"

#!/usr/bin/env bash
# Builds (once) the tools the integration suite runs against krteds, from the Go modules pinned
# in this folder's go.mod: istioctl (from the Istio module krteds builds on) and helm. They land
# in ${KRTEDS_TOOLS_BIN:-$HOME/.cache/krteds/tools/<digest of go.sum>}, which the tests find
# through test/tools/bin.sh; a new pin builds into a new folder. A cold build takes about 7
# minutes on two cores; a warm one does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(bash "$here/bin.sh")"
if [[ -x "$out/istioctl" && -x "$out/helm" ]]; then
  echo "tools present in $out"
  exit 0
fi
mkdir -p "$out"
cd "$here"
export GOFLAGS="-mod=readonly -buildvcs=false"
for tool in istio.io/istio/istioctl/cmd/istioctl helm.sh/helm/v4/cmd/helm; do
  name="$(basename "$tool")"
  echo "building $name"
  go build -trimpath -o "$out/$name.tmp" "$tool"
  mv "$out/$name.tmp" "$out/$name"
done
"$out/helm" version --short
"$out/istioctl" version --remote=false --short

#!/usr/bin/env bash
# Builds (once) what the scale rig runs besides the integration suite's binaries: kube-scheduler
# (from the Kubernetes module test/envtest/kbuild pins) and kwok (from test/scale/kwokbuild), and
# writes kwok's stages (node initialisation and heartbeat, pod ready, complete and delete) from
# the kwok module's own, into the cache folder the rig looks in:
#   ${KRTEDS_SCALE_BIN:-$HOME/.cache/krteds/scale/<versions>}
# A cold build takes about 4 minutes once the envtest binaries are built (the scheduler shares
# their build cache); a warm one does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(bash "$here/bin.sh")"
if [[ -x "$out/kube-scheduler" && -x "$out/kwok" && -s "$out/kwok-stages.yaml" ]]; then
  echo "scale binaries present in $out"
  exit 0
fi
mkdir -p "$out"
export GOFLAGS="-mod=readonly -buildvcs=false"
# shellcheck source=../envtest/ldflags.sh
source "$here/../envtest/ldflags.sh"
(cd "$here/../envtest/kbuild" && go build -ldflags "$(k8s_ldflags v1.37.2)" -o "$out/kube-scheduler.tmp" k8s.io/kubernetes/cmd/kube-scheduler)
mv "$out/kube-scheduler.tmp" "$out/kube-scheduler"
cd "$here/kwokbuild"
go build -trimpath -ldflags "-s -w" -o "$out/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
mv "$out/kwok.tmp" "$out/kwok"
dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
{
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$dir/kustomize/stage/$f"
  done
} >"$out/kwok-stages.yaml.tmp"
mv "$out/kwok-stages.yaml.tmp" "$out/kwok-stages.yaml"
"$out/kwok" --version

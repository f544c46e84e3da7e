#!/usr/bin/env bash
# Builds (once) the kube-apiserver, kube-controller-manager and etcd the integration tests run,
# from Go modules only, into the cache folder the tests look in:
#   ${KRTEDS_ENVTEST_BIN:-$HOME/.cache/krteds/envtest/v1.37.2}
# A cold build takes 15-25 minutes on two cores; a warm one does nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${KRTEDS_ENVTEST_BIN:-$HOME/.cache/krteds/envtest/v1.37.2}"
if [[ -x "$out/kube-apiserver" && -x "$out/kube-controller-manager" && -x "$out/etcd" ]]; then
  echo "envtest binaries present in $out"
  exit 0
fi
mkdir -p "$out"
if ! command -v openssl >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq openssl curl >/dev/null
fi
GOFLAGS=-mod=readonly OUT_DIR="$out" bash "$here/build-binaries.sh"

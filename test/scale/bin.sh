#!/usr/bin/env bash
# Prints the folder the scale rig's binaries are built into (test/scale/build.sh) and read from.
set -euo pipefail
echo "${KRTEDS_SCALE_BIN:-$HOME/.cache/krteds/scale/k8s-v1.37.2-kwok-v0.8.0}"

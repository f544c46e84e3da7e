#!/usr/bin/env bash
# Prints the folder test/tools/build.sh builds the tools into.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ -n "${KRTEDS_TOOLS_BIN:-}" ]]; then echo "$KRTEDS_TOOLS_BIN"; exit 0; fi
echo "$HOME/.cache/krteds/tools/$(sha256sum "$here/go.sum" | cut -c1-12)"

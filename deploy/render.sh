#!/usr/bin/env bash
# Prints deploy/krteds.yaml: the chart rendered with its default values into krteds-system,
# after that namespace. Usage: deploy/render.sh [helm binary] (default: the one
# test/tools/build.sh builds). `make manifests` writes it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
helm="${1:-$(bash "$here/../test/tools/bin.sh")/helm}"
cat <<'HEADER'
# krteds in a cluster without Helm: the chart (deploy/helm/krteds) rendered with its default
# values into the namespace krteds-system, after that namespace. `make manifests` renders it
# again; the integration suite checks the two agree. Apply with: kubectl apply -f deploy/krteds.yaml
# The image is built by the Dockerfile at the top of the repository (make image).
apiVersion: v1
kind: Namespace
metadata:
  name: krteds-system
HEADER
home="$(mktemp -d)"; trap 'rm -rf "$home"' EXIT
HOME="$home" XDG_CACHE_HOME="$home" XDG_CONFIG_HOME="$home" XDG_DATA_HOME="$home" \
  "$helm" template krteds "$here/helm/krteds" --namespace krteds-system

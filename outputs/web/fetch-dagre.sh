#!/usr/bin/env bash
# Re-fetches the graph page's layout library from npm at its pinned version and checks it is
# byte for byte the file embedded here (dagre.min.js bundles @dagrejs/graphlib; both are MIT,
# their licences are LICENSE.dagre and LICENSE.graphlib, served at /debug/krt/licenses).
# To move to another version: change the versions, run with --update, update the digest in
# web.go and look at the graph page test's screenshots.
set -euo pipefail
dagre=3.1.3
graphlib=4.0.6
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm pack --silent "@dagrejs/dagre@$dagre" "@dagrejs/graphlib@$graphlib" >/dev/null
mkdir d g
tar xzf "dagrejs-dagre-$dagre.tgz" -C d
tar xzf "dagrejs-graphlib-$graphlib.tgz" -C g
grep -q "\"@dagrejs/graphlib\": \"$graphlib\"" d/package/package.json || { echo "dagre $dagre does not bundle graphlib $graphlib"; exit 1; }
if [[ "${1:-}" == "--update" ]]; then
  cp d/package/dist/dagre.min.js "$here/dagre.min.js"
  cp d/package/LICENSE "$here/LICENSE.dagre"
  cp g/package/LICENSE "$here/LICENSE.graphlib"
  sha256sum "$here/dagre.min.js"
  exit 0
fi
cmp d/package/dist/dagre.min.js "$here/dagre.min.js"
cmp d/package/LICENSE "$here/LICENSE.dagre"
cmp g/package/LICENSE "$here/LICENSE.graphlib"
echo "dagre $dagre and graphlib $graphlib match the embedded files"

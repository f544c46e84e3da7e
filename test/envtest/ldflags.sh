# Sourced by the build scripts: k8s_ldflags VERSION prints the -ldflags that stamp a Kubernetes
# binary with its version (without them /version says v0.0.0-master+$Format:%H$, which kubectl
# cannot parse), and -s -w (about 30 % smaller).
k8s_ldflags() {
  local version="$1" minor ld="-s -w" p
  minor="${version#v1.}"; minor="${minor%%.*}"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  printf '%s' "$ld"
}

package outputs

import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version and Commit are set at build time:
//
//	go build -ldflags "-X github.com/krteds/krteds/outputs.Version=v0.3.0 -X github.com/krteds/krteds/outputs.Commit=$(git rev-parse HEAD)" ./cmd/krteds
//
// Without them: the module version the binary was built at (go install), else "dev"; the VCS
// revision go build records, else "unknown".
var Version, Commit = "", ""

// BuildInfo is what the binary knows of its build.
type BuildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
}

// Build reads the build information: Version, and the VCS revision go build records.
func Build() BuildInfo {
	b := BuildInfo{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// RegisterBuildInfo exports krteds_build_info{version,commit,go_version} 1.
func RegisterBuildInfo(reg prometheus.Registerer) {
	b := Build()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "krteds_build_info",
		Help: "Always 1; the labels say which build of krteds runs."}, []string{"version", "commit", "go_version"})
	g.WithLabelValues(b.Version, b.Commit, b.GoVersion).Set(1)
	reg.MustRegister(g)
}

// controlPlane is istiod's IstioControlPlaneInstance, as JSON.
type controlPlane struct {
	Component string
	ID        string
	Info      struct {
		Version   string `json:"version"`
		Revision  string `json:"revision"`
		GoVersion string `json:"golang_version"`
		Status    string `json:"status"`
		Tag       string `json:"tag"`
	}
}

// ControlPlaneID is how krteds names itself in istio.io/debug/syncz answers, in istiod's JSON
// (component, instance ID, build), which istioctl proxy-status shows: the instance is $POD_NAME
// (the chart sets it), else the host name.
func ControlPlaneID() string {
	cp := controlPlane{Component: "krteds", ID: os.Getenv("POD_NAME")}
	if cp.ID == "" {
		cp.ID, _ = os.Hostname()
	}
	b := Build()
	cp.Info.Version, cp.Info.Revision, cp.Info.GoVersion, cp.Info.Tag = b.Version, b.Commit, b.GoVersion, b.Version
	cp.Info.Status = "Clean"
	if b.Modified {
		cp.Info.Status = "Modified"
	}
	out, _ := json.Marshal(cp)
	return string(out)
}

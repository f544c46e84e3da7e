package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/history"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/transforms/registry"
)

type serveOptions struct {
	kubeconfig       string
	manifests        string
	xdsAddr          string
	xdsTLSAddr       string
	tlsCert, tlsKey  string
	tlsClientCA      string
	jwtAudiences     []string
	lrsInterval      time.Duration
	debugAddr        string
	debugAllowRemote bool
	logLevel         string
	remoteKubeconfig []string
	remoteManifests  []string
	clusterSecrets   bool
	meshNetworks     string
	meshConfig       string
	demo             bool
	sendBudget       string
	responseBytes    string
	sendTimeout      time.Duration
	staleAfter       time.Duration
	historyPerSvc    int
	streamRate       float64
	drain            time.Duration
	cfg              collections.Config
	limits           xds.Limits
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{cfg: collections.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Watch Kubernetes (or a folder of manifests) and serve xDS",
		Long: `serve watches Services, Pods, Nodes, Namespaces and EndpointSlices (and DestinationRules,
Sidecars, ServiceEntries, WorkloadEntries and PeerAuthentications where their CRDs exist) and serves
the endpoints istiod would serve. With --manifests it reads a YAML file or folder instead of a
cluster; otherwise it uses --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.manifests, "manifests", "", "serve the Kubernetes objects in this YAML file or folder instead of a cluster; a folder with a sub-folder named after --cluster-id holds one sub-folder per cluster")
	f.StringVar(&o.xdsAddr, "xds-addr", "127.0.0.1:15010", "address of the plaintext, unauthenticated xDS (ADS) gRPC server; loopback unless opened, e.g. :15010")
	f.StringVar(&o.xdsTLSAddr, "xds-tls-addr", ":15012", "address of the authenticated xDS server (used when --tls-cert, --tls-key and --tls-client-ca are set)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serving certificate (PEM) of the authenticated xDS server")
	f.StringVar(&o.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	f.StringSliceVar(&o.jwtAudiences, "jwt-audience", []string{"istio-ca"}, "audiences a service-account token presented on the TLS port must carry (checked with TokenReview; not with --manifests)")
	f.StringVar(&o.tlsClientCA, "tls-client-ca", "", "CA bundle (PEM) that client certificates must chain to; each client's SPIFFE identity must match the namespace its node claims")
	f.StringVar(&o.debugAddr, "debug-addr", ":15014", "address of the debug, metrics and readiness HTTP server")
	f.BoolVar(&o.debugAllowRemote, "debug-allow-remote", false, "serve /debug/* to non-loopback clients too")
	f.StringVar(&o.cfg.Domain, "domain", o.cfg.Domain, "cluster DNS domain")
	f.StringVar(&o.cfg.ClusterID, "cluster-id", o.cfg.ClusterID, "cluster ID of this registry")
	f.StringVar(&o.cfg.TrustDomain, "trust-domain", o.cfg.TrustDomain, "SPIFFE trust domain of workload identities")
	f.StringVar(&o.cfg.SystemNamespace, "system-namespace", o.cfg.SystemNamespace, "istiod's namespace: its topology.istio.io/network label is the default network, and it is the root namespace (mesh-wide DestinationRules and PeerAuthentications)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level (debug, info, warn, error), optionally per scope: info,xds=debug,kube=debug")
	f.StringArrayVar(&o.remoteKubeconfig, "remote-kubeconfig", nil, "a remote cluster of the mesh, as <clusterID>=<kubeconfig path>; repeatable")
	f.StringArrayVar(&o.remoteManifests, "remote-manifests", nil, "a remote cluster of the mesh read from a folder of manifests, as <clusterID>=<path>; repeatable")
	f.BoolVar(&o.cfg.LRS, "lrs", false, "serve load reporting (LRS): EDS clusters name krteds as their lrs_server, and the load clients report is exported as krteds_lrs_* metrics and /debug/loadz")
	f.DurationVar(&o.lrsInterval, "lrs-interval", 10*time.Second, "how often clients report their load, with --lrs")
	f.IntVar(&o.cfg.LEDSThreshold, "leds-threshold", 0, "serve the endpoints of ClusterLoadAssignments with more endpoints than this as LEDS collections to Envoy clients on delta ADS, one resource per endpoint (0: off)")
	f.BoolVar(&o.demo, "demo", false, "serve the bundled example mesh (two clusters on two networks), written to a temporary folder whose files stay live")
	f.StringVar(&o.meshNetworks, "mesh-networks", "", "istiod's meshNetworks file: the network of each cluster (fromRegistry) and the network gateways given by address")
	f.BoolVar(&o.clusterSecrets, "cluster-secrets", true, "against a cluster, follow remote clusters in the system namespace's Secrets labelled istio/multiCluster=true (key: cluster ID, value: kubeconfig)")
	f.StringVar(&o.meshConfig, "mesh-config", "", "istiod's mesh config file (the istio ConfigMap's mesh key): its defaultConfig.discoveryAddress and serviceSettings decide the cluster-local hosts")
	f.StringArrayVar(&o.cfg.ClusterLocalHosts, "cluster-local-host", nil, "one more hostname (\"*\" prefix allowed) whose endpoints proxies see only from their own cluster, as a serviceSettings entry with clusterLocal true; repeatable (istiod's defaults stay: *.kube-system.svc.<domain>, kubernetes.default.svc.<domain>, the discovery address's host)")
	f.StringVar(&o.sendBudget, "xds-send-budget", "", "bytes of xDS responses in flight at once, all clients together, e.g. 512Mi (default: a quarter of the memory limit, GOMEMLIMIT or the container's, else 1Gi)")
	f.StringVar(&o.responseBytes, "xds-max-response-bytes", "1Mi", "larger answers go out in parts of at most this size, each acknowledged before the next")
	f.DurationVar(&o.sendTimeout, "xds-send-timeout", xds.DefaultSendTimeout, "a client that reads nothing of a response for this long is disconnected (0: never)")
	f.Float64Var(&o.streamRate, "xds-stream-rate", 0, "new xDS streams let in per second; past it a stream is told to retry, unless it comes back holding current versions (default 500 per CPU; negative: no limit)")
	f.DurationVar(&o.staleAfter, "stale-threshold", xds.DefaultStaleAfter, "a proxy behind what krteds would send it for longer than this is reported stale: krteds_xds_stale_resources, a log line, STALE in proxy-status (0: never)")
	f.IntVar(&o.historyPerSvc, "history-per-service", history.DefaultPerService, "changes of each service's endpoints recorded for krteds explain --history (0: none)")
	f.IntVar(&o.limits.StreamsPerIdentity, "max-streams-per-identity", xds.DefaultMaxStreamsPerIdentity, "streams one authenticated identity may hold open")
	f.DurationVar(&o.drain, "drain-duration", 10*time.Second, "on SIGTERM: not ready at once, no new stream, clients told to go (GOAWAY) and their streams ended spread over this long, then exit")
	return cmd
}

// xdsLimits reads the xDS server's limits from the flags, the send budget's default from the
// memory limit.
func xdsLimits(o *serveOptions, memLimit int64) (xds.Limits, error) {
	l := o.limits
	l.SendBudget = sendBudgetFor(memLimit)
	if o.sendBudget != "" {
		q, err := resource.ParseQuantity(o.sendBudget)
		if err != nil || q.Value() <= 0 {
			return l, fmt.Errorf("--xds-send-budget %q: want a positive size such as 512Mi", o.sendBudget)
		}
		l.SendBudget = q.Value()
	}
	q, err := resource.ParseQuantity(o.responseBytes)
	if err != nil || q.Value() <= 0 || q.Value() > 1<<30 {
		return l, fmt.Errorf("--xds-max-response-bytes %q: want a positive size up to 1Gi, such as 1Mi", o.responseBytes)
	}
	l.ResponseBytes = int(q.Value())
	if l.SendTimeout, err = offOrPositive("--xds-send-timeout", o.sendTimeout, "none"); err != nil {
		return l, err
	}
	l.StreamRate = o.streamRate
	if l.StaleAfter, err = offOrPositive("--stale-threshold", o.staleAfter, "never"); err != nil {
		return l, err
	}
	if l.StreamsPerIdentity <= 0 {
		return l, fmt.Errorf("--max-streams-per-identity %d: want a positive number", l.StreamsPerIdentity)
	}
	return l, nil
}

// remotes reads --remote-kubeconfig and --remote-manifests. A remote cluster's client is made
// without contacting it: one that is unreachable joins when it answers.
func remotes(o *serveOptions) ([]app.Remote, error) {
	var out []app.Remote
	seen := map[string]bool{}
	for _, spec := range append(append([]string(nil), o.remoteKubeconfig...), o.remoteManifests...) {
		id, path, ok := strings.Cut(spec, "=")
		if !ok || id == "" || path == "" {
			return nil, fmt.Errorf("remote cluster %q: want <clusterID>=<path>", spec)
		}
		if seen[id] {
			return nil, fmt.Errorf("remote cluster %s given twice", id)
		}
		seen[id] = true
		if slices.Contains(o.remoteManifests, spec) {
			out = append(out, app.Remote{ID: id, Manifests: path})
			continue
		}
		rc, err := kube.DefaultRestConfig(path, "")
		if err != nil {
			return nil, fmt.Errorf("remote cluster %s: %w", id, err)
		}
		c, err := kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID(id))
		if err != nil {
			return nil, fmt.Errorf("remote cluster %s: %w", id, err)
		}
		out = append(out, app.Remote{ID: id, Client: c})
	}
	return out, nil
}

// clusterFolders reads the layout of --manifests: a folder holding a sub-folder named after the
// local cluster's ID is a folder per cluster (<dir>/<clusterID>/…): that sub-folder is the local
// cluster, every other sub-folder a remote cluster of its name (read as --remote-manifests). Any
// other path is the local cluster alone.
func clusterFolders(path, localID string) (string, []app.Remote, error) {
	if fi, err := os.Stat(filepath.Join(path, localID)); err != nil || !fi.IsDir() {
		return path, nil, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", nil, fmt.Errorf("--manifests: %w", err)
	}
	var remotes []app.Remote
	for _, e := range entries {
		if !e.IsDir() || e.Name() == localID || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		remotes = append(remotes, app.Remote{ID: e.Name(), Manifests: filepath.Join(path, e.Name())})
	}
	return filepath.Join(path, localID), remotes, nil
}

// readMeshConfig reads --mesh-config, as istiod reads its mesh config (defaults applied,
// validated): the discovery address and serviceSettings, which decide the cluster-local hosts.
func readMeshConfig(o *serveOptions) error {
	if o.meshConfig != "" {
		mc, err := readFlagFile("--mesh-config", o.meshConfig, mesh.ApplyMeshConfigDefaults)
		if err != nil {
			return err
		}
		o.cfg.DiscoveryAddress, o.cfg.ServiceSettings = registry.MeshClusterLocalSettings(mc)
	}
	if _, err := o.cfg.WithDefaults().ClusterLocal(); err != nil {
		return fmt.Errorf("cluster-local hosts: %w", err)
	}
	return nil
}

// readFlagFile reads the file a flag names and parses it, each error naming the flag (and the
// file, once read).
func readFlagFile[T any](flag, path string, parse func(string) (T, error)) (T, error) {
	var zero T
	b, err := os.ReadFile(path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", flag, err)
	}
	v, err := parse(string(b))
	if err != nil {
		return zero, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return v, nil
}

// historySize is the app's HistoryPerService for the flag (0: none).
func historySize(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// offOrPositive reads a duration flag whose 0 turns the thing off: -1 (off) for 0, the duration
// for a positive one, an error naming the flag for a negative one.
func offOrPositive(flag string, d time.Duration, zero string) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%s %s: want a positive duration, or 0 for %s", flag, d, zero)
	case d == 0:
		return -1, nil
	}
	return d, nil
}

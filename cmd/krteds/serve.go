package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zapgrpc"
	"google.golang.org/grpc/grpclog"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube"
	istiolog "istio.io/istio/pkg/log"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/examples"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/transforms/eds"
)

func newLogger(spec string) (*zap.Logger, error) {
	levels, err := outputs.ParseLogLevels(spec)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	// The kube client and krt log through Istio's logger; keep them quiet unless debugging.
	io := istiolog.DefaultOptions()
	io.OutputPaths = []string{"stderr"}
	istioLevel := istiolog.WarnLevel
	if levels.Enabled("kube", zapcore.DebugLevel) {
		istioLevel = istiolog.InfoLevel
	}
	io.SetDefaultOutputLevel(istiolog.OverrideScopeName, istioLevel)
	if err := istiolog.Configure(io); err != nil {
		return nil, fmt.Errorf("configuring logs: %w", err)
	}
	return outputs.NewLogger(levels), nil
}

func runServe(ctx context.Context, o *serveOptions) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// gRPC's own warnings and errors go through the same logger.
	grpclog.SetLoggerV2(zapgrpc.NewLogger(log.Named("grpc").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))))

	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if o.demo {
		if o.manifests != "" || o.kubeconfig != "" {
			return fmt.Errorf("--demo serves the bundled examples: it goes without --manifests and --kubeconfig")
		}
		dir, err := os.MkdirTemp("", "krteds-demo-")
		if err != nil {
			return fmt.Errorf("--demo: %w", err)
		}
		defer os.RemoveAll(dir)
		if err := examples.WriteTo(dir); err != nil {
			return fmt.Errorf("--demo: %w", err)
		}
		o.manifests = filepath.Join(dir, "mesh")
		o.remoteManifests = append(o.remoteManifests, "east="+filepath.Join(dir, "east"))
		log.Info("serving the bundled examples", zap.String("folder", dir),
			zap.String("try", "cp "+filepath.Join(dir, "late", "reviews-late-pod.yaml")+" "+o.manifests+"/"))
	}
	if o.meshNetworks != "" {
		mn, err := readFlagFile("--mesh-networks", o.meshNetworks, mesh.ParseMeshNetworks)
		if err != nil {
			return err
		}
		o.cfg.RegistryNetworks, o.cfg.MeshGateways = eds.MeshNetworkSettings(mn)
	}
	if err := readMeshConfig(o); err != nil {
		return err
	}
	// Which services a proxy of a remote cluster sees from its own cluster only.
	cl, _ := o.cfg.WithDefaults().ClusterLocal()
	for _, s := range cl.Hosts() {
		log.Info("cluster-local hosts", zap.Bool("clusterLocal", s.ClusterLocal), zap.Strings("hosts", s.Hosts))
	}
	if o.lrsInterval <= 0 {
		return fmt.Errorf("--lrs-interval %s: want a positive duration", o.lrsInterval)
	}
	if o.drain < 0 {
		return fmt.Errorf("--drain-duration %s: want a duration, 0 for at once", o.drain)
	}
	if o.cfg.LEDSThreshold < 0 {
		return fmt.Errorf("--leds-threshold %d: want 0 (off) or a number of endpoints", o.cfg.LEDSThreshold)
	}
	memLimit, memSource, err := memoryLimit(cgroupMemoryFiles)
	if err != nil {
		return err
	}
	limits, err := xdsLimits(o, memLimit)
	if err != nil {
		return err
	}
	if memLimit > 0 {
		log.Info("memory limit", zap.String("from", memSource), zap.Int64("bytes", memLimit), zap.Int64("sendBudget", limits.SendBudget))
	}
	opts := app.Options{Config: o.cfg, Manifests: o.manifests, DebugAllowRemote: o.debugAllowRemote, Log: log, LRSInterval: o.lrsInterval, Limits: limits,
		HistoryPerService: historySize(o.historyPerSvc)}
	if o.manifests == "" {
		if opts.Cluster, err = clusterClient(ctx, o); err != nil {
			return err
		}
		opts.ClusterSecrets = o.clusterSecrets
	}
	if opts.Remote, err = remotes(o); err != nil {
		return err
	}
	if o.manifests != "" {
		local, others, err := clusterFolders(o.manifests, o.cfg.WithDefaults().ClusterID)
		if err != nil {
			return err
		}
		opts.Manifests = local
		for _, r := range others {
			if slices.ContainsFunc(opts.Remote, func(x app.Remote) bool { return x.ID == r.ID }) {
				return fmt.Errorf("remote cluster %s is both a folder of --manifests and a flag", r.ID)
			}
		}
		opts.Remote = append(opts.Remote, others...)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts.Registry = reg
	if opts.XDSListener, err = net.Listen("tcp", o.xdsAddr); err != nil {
		return fmt.Errorf("xDS server: %w", err)
	}
	if opts.DebugListener, err = net.Listen("tcp", o.debugAddr); err != nil {
		return fmt.Errorf("debug server: %w", err)
	}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsClientCA != "" {
		if o.tlsCert == "" || o.tlsKey == "" || o.tlsClientCA == "" {
			return fmt.Errorf("--tls-cert, --tls-key and --tls-client-ca go together")
		}
		// Against a cluster, clients may authenticate with a service-account token instead of a
		// certificate; manifests have no TokenReview API.
		if o.manifests == "" {
			opts.TokenAudiences = o.jwtAudiences
		}
		if opts.SecureTLS, err = admission.ServerTLS(o.tlsCert, o.tlsKey, o.tlsClientCA, len(opts.TokenAudiences) == 0); err != nil {
			return err
		}
		if opts.SecureListener, err = net.Listen("tcp", o.xdsTLSAddr); err != nil {
			return fmt.Errorf("authenticated xDS server: %w", err)
		}
	}
	start := time.Now()
	a, err := app.Start(opts)
	if err != nil {
		return err
	}
	defer a.Stop()

	if !a.WaitUntilSynced(ctx.Done()) {
		return nil
	}
	g := a.Graph
	log.Info("graph synced", zap.String("source", a.Source), zap.Duration("took", time.Since(start)),
		zap.Int("services", len(g.ServiceInfos.List())), zap.Int("endpointSlices", len(g.SliceEndpoints.List())),
		zap.String("xds", opts.XDSListener.Addr().String()), zap.String("debug", opts.DebugListener.Addr().String()))

	<-ctx.Done()
	log.Info("shutting down: not ready, streams drained", zap.Duration("over", o.drain))
	a.Drain(o.drain)
	log.Info("stopped")
	return nil
}

// clusterClient connects to the cluster named by --kubeconfig (or the usual defaults).
func clusterClient(ctx context.Context, o *serveOptions) (kube.Client, error) {
	rc, err := kube.DefaultRestConfig(o.kubeconfig, "")
	if err != nil {
		return nil, noCluster(err)
	}
	client, err := kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID(o.cfg.ClusterID))
	if err != nil {
		return nil, noCluster(err)
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.Kube().Discovery().RESTClient().Get().AbsPath("/version").Do(vctx).Raw(); err != nil {
		return nil, noCluster(err)
	}
	return client, nil
}

func noCluster(err error) error {
	return fmt.Errorf("no Kubernetes cluster reachable (%v); to try krteds without one, run: krteds serve --demo", err)
}

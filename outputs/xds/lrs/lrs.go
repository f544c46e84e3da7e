// Package lrs serves envoy.service.load_stats.v3.LoadReportingService beside krteds' ADS
// server: it asks each client for the load of every cluster it holds at a fixed interval, and
// adds the reports up per cluster, locality and drop category. Its streams are authenticated
// and authorized as ADS streams are (package admission), and a report counts only for the
// clusters the ADS server sent the reporting proxy (Sent).
package lrs

import (
	"errors"
	"io"
	"sync"
	"time"

	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
)

// clip shortens client-supplied text to 256 bytes, saying how much was cut.
func clip(s string) string { return collections.Truncate(s, 256) }

// Sent says what the ADS server sent a proxy: of names, those whose cluster or CLA some stream
// of the node id (on a connection of the same identity, nil on the plaintext port) was sent.
type Sent interface {
	SentTo(nodeID string, idn *admission.Identity, names []string) map[string]bool
}

// LoadReports serves envoy.service.load_stats.v3.LoadReportingService: it asks each client for
// the load of every cluster it holds at a fixed interval, and adds the reports up per cluster,
// locality and drop category, as Prometheus metrics and for /debug/loadz. Its streams are
// authenticated and authorized as the ADS server's are (Bind ties them).
type LoadReports struct {
	lrs.UnimplementedLoadReportingServiceServer

	interval time.Duration
	log      *zap.Logger
	// sent, tokens and trustDomain are the ADS server's (Bind): nil sent until bound.
	sent        Sent
	tokens      admission.TokenAuthenticator
	trustDomain string

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced after each report and each stream's end
	clusters  map[string]*clusterLoad
	reporters map[int64]*reporter
	// series counts, per series key, the connected streams that reported it.
	series map[seriesKey]int
	nextID int64

	requests   *prometheus.CounterVec
	issued     *prometheus.CounterVec
	inProgress *prometheus.GaugeVec
	dropped    *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	streams    prometheus.Gauge
}

// reporter is one LRS stream.
type reporter struct {
	node       string
	identity   *admission.Identity
	connected  time.Time
	lastReport time.Time
	reports    int
	// inProgress is what it last reported in progress, by (cluster, locality label).
	inProgress map[[2]string]uint64
	// series are the series it reported.
	series map[seriesKey]struct{}
}

// New makes the LRS server: clients report every interval. It serves once bound to an ADS
// server (Bind), which says what each proxy was sent.
func New(interval time.Duration, reg prometheus.Registerer, log *zap.Logger) *LoadReports {
	if log == nil {
		log = zap.NewNop()
	}
	l := &LoadReports{interval: interval, log: log, changed: make(chan struct{}), clusters: map[string]*clusterLoad{}, reporters: map[int64]*reporter{},
		series: map[seriesKey]int{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_requests_total",
			Help: "Requests clients reported finished (LRS), by cluster, locality and result (success, error)."}, []string{"cluster", "locality", "result"}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_requests_issued_total",
			Help: "Requests clients reported issued (LRS), by cluster and locality."}, []string{"cluster", "locality"}),
		inProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "krteds_lrs_requests_in_progress",
			Help: "Requests in progress, as the connected clients last reported them (LRS), by cluster and locality."}, []string{"cluster", "locality"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_dropped_requests_total",
			Help: "Requests clients reported dropped (LRS), by cluster and category (\"\" for drops without one)."}, []string{"cluster", "category"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_rejected_stats_total",
			Help: "Cluster stats of load reports not counted, by reason: not_sent (a cluster krteds did not send the reporting proxy), stream_bound (the stream reports too many series)."}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "krteds_lrs_streams", Help: "Connected LRS streams."}),
	}
	l.rejected.WithLabelValues(rejectNotSent)
	l.rejected.WithLabelValues(rejectStreamBound)
	if reg != nil {
		reg.MustRegister(l.requests, l.issued, l.inProgress, l.dropped, l.rejected, l.streams)
	}
	return l
}

// Bind ties the LRS server to the ADS server whose proxies report: its streams are
// authenticated with tokens (nil: certificates only) and authorized in trustDomain as the ADS
// server's are, and a report counts for what sent says the proxy was sent.
func (l *LoadReports) Bind(sent Sent, tokens admission.TokenAuthenticator, trustDomain string) {
	l.mu.Lock()
	l.sent, l.tokens, l.trustDomain = sent, tokens, trustDomain
	l.mu.Unlock()
}

// StreamLoadStats runs one LRS stream. On the authenticated port it is authenticated as it
// opens, and its node must be one its identity may act as, as for ADS.
func (l *LoadReports) StreamLoadStats(stream lrs.LoadReportingService_StreamLoadStatsServer) error {
	l.mu.Lock()
	sent, tokens, trustDomain := l.sent, l.tokens, l.trustDomain
	l.mu.Unlock()
	if sent == nil {
		return status.Error(codes.Unavailable, "load reporting is not served")
	}
	idn, tlsConn, err := admission.Authenticate(stream.Context(), tokens)
	if tlsConn && err != nil {
		return status.Error(codes.Unauthenticated, clip(err.Error()))
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetNode().GetId() == "" {
		return status.Error(codes.InvalidArgument, "the first load stats request must carry a node")
	}
	cp, err := admission.ProxyFromNode("lrs", first.GetNode())
	if err == nil {
		err = admission.Authorize(idn, trustDomain, cp.Namespace)
	}
	if err != nil {
		code := status.Code(err)
		if code == codes.Unknown {
			code = codes.InvalidArgument
		}
		return status.Error(code, clip(status.Convert(err).Message()))
	}
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	r := &reporter{node: cp.ID, identity: idn, connected: time.Now(), inProgress: map[[2]string]uint64{}, series: map[seriesKey]struct{}{}}
	l.reporters[id] = r
	l.mu.Unlock()
	l.streams.Inc()
	defer l.leave(id, r)
	if err := stream.Send(&lrs.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(l.interval)}); err != nil {
		return err
	}
	l.add(r, first)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		l.add(r, req)
	}
}

// leave forgets a stream: what it had in progress, and the series no other stream reports.
func (l *LoadReports) leave(id int64, r *reporter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range r.inProgress {
		l.setInProgress(k, -int64(v))
	}
	for k := range r.series {
		if l.series[k]--; l.series[k] > 0 {
			continue
		}
		delete(l.series, k)
		l.deleteSeries(k)
	}
	delete(l.reporters, id)
	close(l.changed)
	l.changed = make(chan struct{})
	l.streams.Dec()
}

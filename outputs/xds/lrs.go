package xds

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Bounds on what clients' load reports can make krteds keep: reports count only for clusters
// krteds serves, each with at most maxLoadLocalities localities and maxDropCategories drop
// categories (the rest are counted under "other").
const (
	maxLoadLocalities = 64
	maxDropCategories = 16
	otherLabel        = "other"
)

// LoadReports serves envoy.service.load_stats.v3.LoadReportingService: it asks each client for
// the load of every cluster it holds at a fixed interval, and adds the reports up per cluster,
// locality and drop category, as Prometheus metrics and for /debug/loadz.
type LoadReports struct {
	lrs.UnimplementedLoadReportingServiceServer

	interval time.Duration
	known    func(cluster string) bool
	log      *zap.Logger

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced after each report and each stream's end
	clusters  map[string]*clusterLoad
	reporters map[int64]*reporter
	nextID    int64

	requests   *prometheus.CounterVec
	issued     *prometheus.CounterVec
	inProgress *prometheus.GaugeVec
	dropped    *prometheus.CounterVec
	rejected   *prometheus.CounterVec
	streams    prometheus.Gauge
}

// clusterLoad is the sum of the reports of one cluster.
type clusterLoad struct {
	localities map[string]*LocalityLoad
	drops      map[string]uint64
}

// LocalityLoad is the load reported for one locality of a cluster.
type LocalityLoad struct {
	Successful uint64 `json:"successful"`
	Errors     uint64 `json:"errors"`
	Issued     uint64 `json:"issued"`
	// InProgress is the sum of what each connected reporter last reported.
	InProgress uint64 `json:"inProgress"`
}

// reporter is one LRS stream.
type reporter struct {
	node       string
	connected  time.Time
	lastReport time.Time
	reports    int
	// inProgress is what it last reported in progress, by (cluster, locality label).
	inProgress map[[2]string]uint64
}

// NewLoadReports makes the LRS server: clients report every interval; known says which cluster
// names krteds serves (reports of others are dropped and counted).
func NewLoadReports(interval time.Duration, known func(string) bool, reg prometheus.Registerer, log *zap.Logger) *LoadReports {
	if log == nil {
		log = zap.NewNop()
	}
	l := &LoadReports{interval: interval, known: known, log: log, changed: make(chan struct{}), clusters: map[string]*clusterLoad{}, reporters: map[int64]*reporter{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_requests_total",
			Help: "Requests clients reported finished (LRS), by cluster, locality and result (success, error)."}, []string{"cluster", "locality", "result"}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_requests_issued_total",
			Help: "Requests clients reported issued (LRS), by cluster and locality."}, []string{"cluster", "locality"}),
		inProgress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "krteds_lrs_requests_in_progress",
			Help: "Requests in progress, as the connected clients last reported them (LRS), by cluster and locality."}, []string{"cluster", "locality"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_dropped_requests_total",
			Help: "Requests clients reported dropped (LRS), by cluster and category (\"\" for drops without one)."}, []string{"cluster", "category"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "krteds_lrs_rejected_stats_total",
			Help: "Cluster stats of load reports not counted, by reason."}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "krteds_lrs_streams", Help: "Connected LRS streams."}),
	}
	l.rejected.WithLabelValues("unknown_cluster")
	if reg != nil {
		reg.MustRegister(l.requests, l.issued, l.inProgress, l.dropped, l.rejected, l.streams)
	}
	return l
}

// StreamLoadStats runs one LRS stream.
func (l *LoadReports) StreamLoadStats(stream lrs.LoadReportingService_StreamLoadStatsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	node := clip(first.GetNode().GetId())
	if node == "" {
		return status.Error(codes.InvalidArgument, "the first load stats request must carry a node")
	}
	l.mu.Lock()
	l.nextID++
	id := l.nextID
	r := &reporter{node: node, connected: time.Now(), inProgress: map[[2]string]uint64{}}
	l.reporters[id] = r
	l.mu.Unlock()
	l.streams.Inc()
	defer func() {
		l.mu.Lock()
		for k, v := range r.inProgress {
			l.setInProgress(k, -int64(v))
		}
		delete(l.reporters, id)
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
		l.streams.Dec()
	}()
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

// add counts one report.
func (l *LoadReports) add(r *reporter, req *lrs.LoadStatsRequest) {
	if len(req.GetClusterStats()) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() {
		close(l.changed)
		l.changed = make(chan struct{})
	}()
	r.lastReport = time.Now()
	r.reports++
	for _, cs := range req.GetClusterStats() {
		// Stats are kept under the EDS service name, which is krteds' cluster name.
		name := cs.GetClusterServiceName()
		if name == "" {
			name = cs.GetClusterName()
		}
		if !l.known(name) {
			l.rejected.WithLabelValues("unknown_cluster").Inc()
			continue
		}
		c := l.clusters[name]
		if c == nil {
			c = &clusterLoad{localities: map[string]*LocalityLoad{}, drops: map[string]uint64{}}
			l.clusters[name] = c
		}
		for _, ls := range cs.GetUpstreamLocalityStats() {
			loc := localityLabel(ls.GetLocality())
			if _, ok := c.localities[loc]; !ok && len(c.localities) >= maxLoadLocalities {
				loc = otherLabel
			}
			ll := c.localities[loc]
			if ll == nil {
				ll = &LocalityLoad{}
				c.localities[loc] = ll
			}
			ll.Successful += ls.GetTotalSuccessfulRequests()
			ll.Errors += ls.GetTotalErrorRequests()
			ll.Issued += ls.GetTotalIssuedRequests()
			l.requests.WithLabelValues(name, loc, "success").Add(float64(ls.GetTotalSuccessfulRequests()))
			l.requests.WithLabelValues(name, loc, "error").Add(float64(ls.GetTotalErrorRequests()))
			l.issued.WithLabelValues(name, loc).Add(float64(ls.GetTotalIssuedRequests()))
			key := [2]string{name, loc}
			now := ls.GetTotalRequestsInProgress()
			l.setInProgress(key, int64(now)-int64(r.inProgress[key]))
			r.inProgress[key] = now
		}
		categorized := uint64(0)
		for _, d := range cs.GetDroppedRequests() {
			l.drop(name, c, clip(d.GetCategory()), d.GetDroppedCount())
			categorized += d.GetDroppedCount()
		}
		if total := cs.GetTotalDroppedRequests(); total > categorized {
			l.drop(name, c, "", total-categorized)
		}
	}
}

func (l *LoadReports) drop(cluster string, c *clusterLoad, category string, n uint64) {
	if _, ok := c.drops[category]; !ok && len(c.drops) >= maxDropCategories {
		category = otherLabel
	}
	c.drops[category] += n
	l.dropped.WithLabelValues(cluster, category).Add(float64(n))
}

// setInProgress moves the in-progress total of a (cluster, locality) by delta (l.mu held).
func (l *LoadReports) setInProgress(key [2]string, delta int64) {
	c := l.clusters[key[0]]
	if c == nil || c.localities[key[1]] == nil || delta == 0 {
		return
	}
	ll := c.localities[key[1]]
	ll.InProgress = uint64(max(int64(ll.InProgress)+delta, 0))
	l.inProgress.WithLabelValues(key[0], key[1]).Set(float64(ll.InProgress))
}

// Loadz is /debug/loadz: the load reported per cluster, and the reporters.
type Loadz struct {
	IntervalSeconds float64                 `json:"reportingIntervalSeconds"`
	Clusters        map[string]ClusterLoadz `json:"clusters"`
	Reporters       []ReporterLoadz         `json:"reporters"`
}

// ClusterLoadz is one cluster's load.
type ClusterLoadz struct {
	Localities map[string]LocalityLoad `json:"localities"`
	Dropped    map[string]uint64       `json:"dropped,omitempty"`
}

// ReporterLoadz is one LRS stream.
type ReporterLoadz struct {
	Node       string    `json:"node"`
	Connected  time.Time `json:"connected"`
	LastReport time.Time `json:"lastReport,omitzero"`
	Reports    int       `json:"reports"`
}

// WaitFor waits until the totals satisfy cond, checking after each report; false if ctx ends
// first.
func (l *LoadReports) WaitFor(ctx context.Context, cond func(Loadz) bool) bool {
	for {
		l.mu.Lock()
		lz, changed := l.loadz(), l.changed
		l.mu.Unlock()
		if cond(lz) {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// Loadz reads the totals.
func (l *LoadReports) Loadz() Loadz {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loadz()
}

func (l *LoadReports) loadz() Loadz {
	out := Loadz{IntervalSeconds: l.interval.Seconds(), Clusters: map[string]ClusterLoadz{}, Reporters: []ReporterLoadz{}}
	for name, c := range l.clusters {
		cz := ClusterLoadz{Localities: map[string]LocalityLoad{}}
		for loc, ll := range c.localities {
			cz.Localities[loc] = *ll
		}
		if len(c.drops) > 0 {
			cz.Dropped = map[string]uint64{}
			for k, v := range c.drops {
				cz.Dropped[k] = v
			}
		}
		out.Clusters[name] = cz
	}
	for _, r := range l.reporters {
		out.Reporters = append(out.Reporters, ReporterLoadz{Node: r.node, Connected: r.connected, LastReport: r.lastReport, Reports: r.reports})
	}
	slices.SortFunc(out.Reporters, func(a, b ReporterLoadz) int { return a.Connected.Compare(b.Connected) })
	return out
}

// localityLabel renders a locality as region/zone/subzone.
func localityLabel(l *core.Locality) string {
	return clip(l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone())
}

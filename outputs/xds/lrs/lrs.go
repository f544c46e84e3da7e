// Package lrs serves envoy.service.load_stats.v3.LoadReportingService beside krteds' ADS
// server: it asks each client for the load of every cluster it holds at a fixed interval, and
// adds the reports up per cluster, locality and drop category. Its streams are authenticated
// and authorized as ADS streams are (package admission), and a report counts only for the
// clusters the ADS server sent the reporting proxy (Sent).
package lrs

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
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

// Bounds on what clients' load reports can make krteds keep: a report counts only for the
// clusters krteds sent the reporting proxy, each with at most maxLoadLocalities localities and
// maxDropCategories drop categories (the rest are counted under "other"), and one stream adds
// at most maxStreamSeries series; a series lives as long as a connected stream reports it.
const (
	maxLoadLocalities = 64
	maxDropCategories = 16
	maxStreamSeries   = 4096
	otherLabel        = "other"
)

// Reasons a report's cluster stats are not counted (krteds_lrs_rejected_stats_total).
const (
	rejectNotSent     = "not_sent"
	rejectStreamBound = "stream_bound"
)

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

// seriesKey is a (cluster, locality) of the request series or, with drop set, a (cluster,
// category) of the dropped series.
type seriesKey struct {
	cluster, label string
	drop           bool
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

// statsName is the name a cluster's stats are kept under: the EDS service name, which is
// krteds' cluster name, else the cluster name.
func statsName(cs *endpoint.ClusterStats) string {
	if n := cs.GetClusterServiceName(); n != "" {
		return n
	}
	return cs.GetClusterName()
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

// deleteSeries drops a series no connected stream reports, from the metrics and the totals
// (l.mu held).
func (l *LoadReports) deleteSeries(k seriesKey) {
	c := l.clusters[k.cluster]
	if k.drop {
		l.dropped.DeleteLabelValues(k.cluster, k.label)
		if c != nil {
			delete(c.drops, k.label)
		}
	} else {
		l.requests.DeleteLabelValues(k.cluster, k.label, "success")
		l.requests.DeleteLabelValues(k.cluster, k.label, "error")
		l.issued.DeleteLabelValues(k.cluster, k.label)
		l.inProgress.DeleteLabelValues(k.cluster, k.label)
		if c != nil {
			delete(c.localities, k.label)
		}
	}
	if c != nil && len(c.localities) == 0 && len(c.drops) == 0 {
		delete(l.clusters, k.cluster)
	}
}

// hold makes r a reporter of series k, within its bound (l.mu held).
func (l *LoadReports) hold(r *reporter, k seriesKey) bool {
	if _, ok := r.series[k]; ok {
		return true
	}
	if len(r.series) >= maxStreamSeries {
		return false
	}
	r.series[k] = struct{}{}
	l.series[k]++
	return true
}

// add counts one report: the stats of clusters krteds sent the reporting proxy.
func (l *LoadReports) add(r *reporter, req *lrs.LoadStatsRequest) {
	if len(req.GetClusterStats()) == 0 {
		return
	}
	names := make([]string, len(req.GetClusterStats()))
	for i, cs := range req.GetClusterStats() {
		names[i] = statsName(cs)
	}
	l.mu.Lock()
	srv := l.sent
	l.mu.Unlock()
	sent := srv.SentTo(r.node, r.identity, names)
	l.mu.Lock()
	defer l.mu.Unlock()
	defer func() {
		close(l.changed)
		l.changed = make(chan struct{})
	}()
	r.lastReport = time.Now()
	r.reports++
	for i, cs := range req.GetClusterStats() {
		name := names[i]
		if !sent[name] {
			l.rejected.WithLabelValues(rejectNotSent).Inc()
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
			if !l.hold(r, seriesKey{cluster: name, label: loc}) {
				l.rejected.WithLabelValues(rejectStreamBound).Inc()
				continue
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
			l.drop(r, name, c, clip(d.GetCategory()), d.GetDroppedCount())
			categorized += d.GetDroppedCount()
		}
		if total := cs.GetTotalDroppedRequests(); total > categorized {
			l.drop(r, name, c, "", total-categorized)
		}
		if len(c.localities) == 0 && len(c.drops) == 0 {
			delete(l.clusters, name)
		}
	}
}

func (l *LoadReports) drop(r *reporter, cluster string, c *clusterLoad, category string, n uint64) {
	if _, ok := c.drops[category]; !ok && len(c.drops) >= maxDropCategories {
		category = otherLabel
	}
	if !l.hold(r, seriesKey{cluster: cluster, label: category, drop: true}) {
		l.rejected.WithLabelValues(rejectStreamBound).Inc()
		return
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

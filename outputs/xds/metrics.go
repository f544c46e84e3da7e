package xds

import (
	"cmp"
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the xDS server's Prometheus metrics. Every label takes its values from a fixed set:
// the four resource types krteds serves, and the two proxy types a node id may name.
type Metrics struct {
	Clients       *prometheus.GaugeVec
	Pushes        *prometheus.CounterVec
	PushErrors    *prometheus.CounterVec
	NACKs         *prometheus.CounterVec
	ExpiredNonces *prometheus.CounterVec
	ConfigSize    *prometheus.HistogramVec
	Convergence   *prometheus.HistogramVec
	RejectedNodes prometheus.Counter
	UnknownTypes  prometheus.Counter
	// The send budget (flight.go) and stream admission (admit.go).
	SendBudget     prometheus.Gauge
	InFlight       prometheus.Gauge
	WaitingStreams prometheus.Gauge
	BudgetWait     prometheus.Histogram
	Throttled      prometheus.Counter
	Resumed        prometheus.Counter
	Stalled        prometheus.Counter
	// NetworkProgramming is the time from an input change to the ACK of the response carrying
	// it, by stage (total, cluster, compute, send, proxy) and the changed object's kind.
	NetworkProgramming *prometheus.HistogramVec
	// StaleResources are the names clients have been behind on for longer than the stale
	// threshold, by what they wait on; StaleDuration how long each such lag lasted, observed as
	// it ends, by what it waited on as it crossed the threshold.
	StaleResources *prometheus.GaugeVec
	StaleDuration  *prometheus.HistogramVec

	// The same facts under istiod's names, labels and buckets (pilot/pkg/xds/monitoring.go,
	// pkg/xds/monitoring.go), for the dashboards and alerts written for istiod.
	Istio IstioMetrics

	// byType are the series every response counts in, by type: looked up once, not at each
	// response (a label lookup hashes its values under a lock).
	byType [numTypes]typeSeries
}

// typeSeries are the series of one type that each response, or each ACK, updates.
type typeSeries struct {
	pushes, istioPushes       prometheus.Counter
	configSize, istioPushTime prometheus.Observer
	convergence               prometheus.Observer
}

// IstioMetrics are istiod's xDS metrics. Their type label is istiod's: cds, eds, lds, rds.
type IstioMetrics struct {
	Clients         *prometheus.GaugeVec     // pilot_xds{version}
	Pushes          *prometheus.CounterVec   // pilot_xds_pushes{type}: cds, …; cds_senderr, …
	PushTime        *prometheus.HistogramVec // pilot_xds_push_time{type}
	ConvergenceTime prometheus.Histogram     // pilot_proxy_convergence_time
	Rejects         *prometheus.CounterVec   // pilot_total_xds_rejects{type}
	ExpiredNonces   *prometheus.CounterVec   // pilot_xds_expired_nonce{type}
	versionsMu      sync.Mutex
	versions        map[string]bool
}

// istioTypes are istiod's type label values of the types krteds serves, in shortNames order
// (LEDS, which istiod does not serve, as "leds").
var istioTypes = [...]string{"cds", "eds", "lds", "rds", "leds"}

// Every type has a label: a type added to typ without one fails to compile here.
var _ = [1]struct{}{}[len(istioTypes)-int(numTypes)]

// maxProxyVersions bounds the version label of pilot_xds: a client names its own version.
const maxProxyVersions = 32

var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?(-[A-Za-z0-9.]+)?$`)

// versionLabel is the pilot_xds label of a client's ISTIO_VERSION: "" when it has none, "other"
// when it is not a version or when the label already holds maxProxyVersions versions.
func (m *IstioMetrics) versionLabel(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > 40 || !versionPattern.MatchString(v) {
		return "other"
	}
	m.versionsMu.Lock()
	defer m.versionsMu.Unlock()
	if !m.versions[v] {
		if len(m.versions) >= maxProxyVersions {
			return "other"
		}
		m.versions[v] = true
	}
	return v
}

// NewMetrics creates the metrics and registers them with reg (when not nil). Every series exists
// from the start, at zero.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &Metrics{
		Clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krteds_xds_clients", Help: "Connected xDS clients by proxy type.",
		}, []string{"proxy_type"}),
		Pushes:        byType("krteds_xds_pushes_total", "xDS responses sent, by resource type."),
		PushErrors:    byType("krteds_xds_push_errors_total", "xDS responses that could not be sent, by resource type."),
		NACKs:         byType("krteds_xds_rejects_total", "xDS responses rejected (NACKed) by clients, by resource type."),
		ExpiredNonces: byType("krteds_xds_expired_nonces_total", "xDS requests answering a response older than the latest sent, by resource type."),
		ConfigSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "krteds_xds_config_size_bytes", Help: "Size of the resources in one xDS response, by resource type.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}, []string{"type"}),
		Convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "krteds_xds_convergence_seconds", Help: "Time from an input change to the xDS response that carries it to a client holding an older version, by resource type.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"type"}),
		RejectedNodes:  counter("krteds_xds_rejected_nodes_total", "Streams refused: unauthenticated, over a bound, or with a node id or metadata malformed or not authorized."),
		UnknownTypes:   counter("krteds_xds_unknown_type_requests_total", "Requests for resource types krteds does not serve."),
		SendBudget:     gauge("krteds_xds_send_budget_bytes", "The bytes of responses the server may have handed to gRPC and not seen written, or be encoding."),
		InFlight:       gauge("krteds_xds_inflight_bytes", "Bytes of responses handed to gRPC and not yet written, or being encoded."),
		WaitingStreams: gauge("krteds_xds_budget_waiting_streams", "Streams whose next response waits for the send budget."),
		BudgetWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "krteds_xds_budget_wait_seconds", Help: "Time a response waited for the send budget.",
			Buckets: []float64{.001, .01, .1, .5, 1, 3, 10, 30},
		}),
		Throttled: counter("krteds_xds_throttled_streams_total", "New streams told to retry (RESOURCE_EXHAUSTED) because more came than the stream rate allows."),
		Resumed:   counter("krteds_xds_resumed_streams_total", "New delta streams let in past the stream rate because the versions they hold are current."),
		Stalled:   counter("krteds_xds_stalled_streams_total", "Streams closed because their client read nothing of a response for the send timeout."),
		NetworkProgramming: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "krteds_network_programming_duration_seconds",
			Help:    "Time from the change of an input to the ACK of the response carrying the CLA computed for it, once per proxy and change, by stage: total (trigger → ACK); cluster (trigger → krteds saw it); compute (seen → CLA computed); send (computed → response handed to gRPC); proxy (handed → ACK); and by what the trigger time is: EndpointSlice (the EndpointSlice controller's stamp, endpoints.kubernetes.io/last-change-trigger-time), Pod (a Pod's Ready transition), file (a manifest's change), none (no trigger: only the stages from krteds seeing it).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"stage", "kind"}),
		StaleResources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krteds_xds_stale_resources",
			Help: "Resources (names of a type on a stream) whose client has been behind what krteds would send it for longer than the stale threshold, by what it waits on.",
		}, []string{"reason"}),
		StaleDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "krteds_xds_stale_duration_seconds",
			Help:    "How long a client stayed behind on a type once past the stale threshold, observed as it caught up (or its stream ended), by what it waited on as it crossed the threshold.",
			Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"reason"}),
	}
	m.Istio.init()
	for t := range numTypes {
		m.byType[t] = typeSeries{
			pushes: m.Pushes.WithLabelValues(t.short()), istioPushes: m.Istio.Pushes.WithLabelValues(istioTypes[t]),
			configSize: m.ConfigSize.WithLabelValues(t.short()), istioPushTime: m.Istio.PushTime.WithLabelValues(istioTypes[t]),
			convergence: m.Convergence.WithLabelValues(t.short()),
		}
	}
	for _, t := range shortNames {
		m.Pushes.WithLabelValues(t)
		m.PushErrors.WithLabelValues(t)
		m.NACKs.WithLabelValues(t)
		m.ExpiredNonces.WithLabelValues(t)
		m.ConfigSize.WithLabelValues(t)
		m.Convergence.WithLabelValues(t)
	}
	for _, p := range []string{"sidecar", "router"} {
		m.Clients.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(m.Clients, m.Pushes, m.PushErrors, m.NACKs, m.ExpiredNonces, m.ConfigSize, m.Convergence, m.RejectedNodes, m.UnknownTypes,
			m.SendBudget, m.InFlight, m.WaitingStreams, m.BudgetWait, m.Throttled, m.Resumed, m.Stalled, m.NetworkProgramming, m.StaleResources, m.StaleDuration,
			m.Istio.Clients, m.Istio.Pushes, m.Istio.PushTime, m.Istio.ConvergenceTime, m.Istio.Rejects, m.Istio.ExpiredNonces)
	}
	return m
}

// byType is a counter by resource type.
func byType(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"type"})
}

// init creates istiod's metrics (unregistered).
func (m *IstioMetrics) init() {
	*m = IstioMetrics{
		Clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pilot_xds", Help: "Number of endpoints connected to this pilot using XDS.",
		}, []string{"version"}),
		Pushes: byType("pilot_xds_pushes", "Pilot build and send errors for lds, rds, cds and eds."),
		PushTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pilot_xds_push_time", Help: "Total time in seconds Pilot takes to push lds, rds, cds and eds.",
			Buckets: []float64{.01, .1, 1, 3, 5, 10, 20, 30},
		}, []string{"type"}),
		ConvergenceTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pilot_proxy_convergence_time", Help: "Delay in seconds between config change and a proxy receiving all required configuration.",
			Buckets: []float64{.1, .5, 1, 3, 5, 10, 20, 30},
		}),
		Rejects:       byType("pilot_total_xds_rejects", "Total number of XDS responses from pilot rejected by proxy."),
		ExpiredNonces: byType("pilot_xds_expired_nonce", "Total number of XDS requests with an expired nonce."),
		versions:      map[string]bool{},
	}
	for _, t := range istioTypes {
		m.Pushes.WithLabelValues(t)
		m.Pushes.WithLabelValues(t + "_senderr")
		m.PushTime.WithLabelValues(t)
		m.Rejects.WithLabelValues(t)
		m.ExpiredNonces.WithLabelValues(t)
	}
	m.Clients.WithLabelValues("")
}

func (m *Metrics) clients(proxyType, istioVersion string, delta float64) {
	m.Clients.WithLabelValues(proxyType).Add(delta)
	m.Istio.Clients.WithLabelValues(istioVersion).Add(delta)
}

func (m *Metrics) pushed(t typ, bytes int, took float64) {
	s := &m.byType[t]
	s.pushes.Inc()
	s.configSize.Observe(float64(bytes))
	s.istioPushes.Inc()
	s.istioPushTime.Observe(took)
}

func (m *Metrics) pushFailed(t typ) {
	m.PushErrors.WithLabelValues(t.short()).Inc()
	m.Istio.Pushes.WithLabelValues(istioTypes[t] + "_senderr").Inc()
}

func (m *Metrics) converged(t typ, seconds float64) {
	m.byType[t].convergence.Observe(seconds)
	m.Istio.ConvergenceTime.Observe(seconds)
}

func (m *Metrics) rejected(t typ) {
	m.NACKs.WithLabelValues(t.short()).Inc()
	m.Istio.Rejects.WithLabelValues(istioTypes[t]).Inc()
}

func (m *Metrics) expiredNonce(t typ) {
	m.ExpiredNonces.WithLabelValues(t.short()).Inc()
	m.Istio.ExpiredNonces.WithLabelValues(istioTypes[t]).Inc()
}

// Stages of the network programming latency.
const (
	StageTotal   = "total"
	StageCluster = "cluster"
	StageCompute = "compute"
	StageSend    = "send"
	StageProxy   = "proxy"
)

// programmed observes a change's stages once the response carrying it is acknowledged at ack
// (unix ns): a stage of which a time is unknown is not observed.
func (m *Metrics) programmed(c timedCause, handed, ack int64) {
	obs := func(stage string, from, to int64) {
		if from > 0 && to >= from {
			m.NetworkProgramming.WithLabelValues(stage, cmp.Or(c.TriggerFrom, "none")).Observe(float64(to-from) / 1e9)
		}
	}
	obs(StageTotal, c.Trigger, ack)
	obs(StageCluster, c.Trigger, c.Seen)
	obs(StageCompute, c.Seen, c.computed)
	obs(StageSend, c.computed, handed)
	obs(StageProxy, handed, ack)
}

// staleNow counts a report past the threshold in the gauge in place of the one it replaces.
func (m *Metrics) staleNow(rep *staleReport, now staleReport) {
	now.names = max(now.names, 1)
	if *rep == now {
		return
	}
	if rep.since != 0 {
		m.StaleResources.WithLabelValues(rep.reason).Sub(float64(rep.names))
	}
	m.StaleResources.WithLabelValues(now.reason).Add(float64(now.names))
	*rep = now
}

// staleEnded takes a report out of the gauge as its lag ends at at (unix ns), observing how long
// it lasted.
func (m *Metrics) staleEnded(rep staleReport, at int64) {
	m.staleGone(rep)
	m.StaleDuration.WithLabelValues(rep.crossed).Observe(float64(at-rep.since) / 1e9)
}

// staleGone takes a report out of the gauge.
func (m *Metrics) staleGone(rep staleReport) {
	m.StaleResources.WithLabelValues(rep.reason).Sub(float64(rep.names))
}

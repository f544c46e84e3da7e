package xds

import (
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
}

// NewMetrics creates the metrics and registers them with reg (when not nil). Every series exists
// from the start, at zero.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krteds_xds_clients", Help: "Connected xDS clients by proxy type.",
		}, []string{"proxy_type"}),
		Pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krteds_xds_pushes_total", Help: "xDS responses sent, by resource type.",
		}, []string{"type"}),
		PushErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krteds_xds_push_errors_total", Help: "xDS responses that could not be sent, by resource type.",
		}, []string{"type"}),
		NACKs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krteds_xds_rejects_total", Help: "xDS responses rejected (NACKed) by clients, by resource type.",
		}, []string{"type"}),
		ExpiredNonces: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krteds_xds_expired_nonces_total", Help: "xDS requests answering a response older than the latest sent, by resource type.",
		}, []string{"type"}),
		ConfigSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "krteds_xds_config_size_bytes", Help: "Size of the resources in one xDS response, by resource type.",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}, []string{"type"}),
		Convergence: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "krteds_xds_convergence_seconds", Help: "Time from an input change to the xDS response that carries it to a client holding an older version, by resource type.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"type"}),
		RejectedNodes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "krteds_xds_rejected_nodes_total", Help: "Streams refused because the node id or metadata was malformed or not authorized.",
		}),
		UnknownTypes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "krteds_xds_unknown_type_requests_total", Help: "Requests for resource types krteds does not serve.",
		}),
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
		reg.MustRegister(m.Clients, m.Pushes, m.PushErrors, m.NACKs, m.ExpiredNonces, m.ConfigSize, m.Convergence, m.RejectedNodes, m.UnknownTypes)
	}
	return m
}

func (m *Metrics) clients(proxyType string, delta float64) {
	m.Clients.WithLabelValues(proxyType).Add(delta)
}

func (m *Metrics) pushed(short string, bytes int) {
	m.Pushes.WithLabelValues(short).Inc()
	m.ConfigSize.WithLabelValues(short).Observe(float64(bytes))
}

package outputs

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
)

// Collector exports every collection's size, recomputations and output events as metrics.
type Collector struct {
	d          *graphs.Description
	size       *prometheus.Desc
	recomputes *prometheus.Desc
	events     *prometheus.Desc
}

// NewCollector exports d's live counters.
func NewCollector(d *graphs.Description) *Collector {
	return &Collector{
		d:          d,
		size:       prometheus.NewDesc("krteds_collection_size", "Number of objects in a krt collection.", []string{"collection"}, nil),
		recomputes: prometheus.NewDesc("krteds_collection_recomputations_total", "Transformation runs of a derived krt collection.", []string{"collection"}, nil),
		events:     prometheus.NewDesc("krteds_collection_events_total", "Add, update and delete events a krt collection emitted.", []string{"collection"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.recomputes
	ch <- c.events
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.d.Snapshot().Nodes {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(n.Size), n.Name)
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(n.Events), n.Name)
		if n.Kind == graphs.KindDerived {
			ch <- prometheus.MustNewConstMetric(c.recomputes, prometheus.CounterValue, float64(n.Recomputes), n.Name)
		}
	}
}

// RegisterIstioRegistryMetrics exports istiod's registry gauges for the same facts:
// pilot_services (the services krteds knows) and pilot_k8s_endpoints_pending_pod (slice
// endpoints waiting for the Pod they name), kept from the graph's events, nothing per scrape.
func RegisterIstioRegistryMetrics(reg prometheus.Registerer, g *graphs.Graph) {
	var pending atomic.Int64
	g.SliceEndpoints.RegisterBatch(func(evs []krt.Event[collections.SliceEndpoints]) {
		for _, e := range evs {
			if e.Old != nil {
				pending.Add(-int64(e.Old.PendingPods))
			}
			if e.New != nil {
				pending.Add(int64(e.New.PendingPods))
			}
		}
	}, true)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pilot_services", Help: "Total services known to pilot."}, func() float64 {
			n, _ := g.Description.Snapshot().Node(graphs.NameServiceInfos)
			return float64(n.Size)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pilot_k8s_endpoints_pending_pod",
			Help: "Number of endpoints that do not currently have any corresponding pods."}, func() float64 {
			return float64(pending.Load())
		}),
	)
}

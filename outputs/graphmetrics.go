package outputs

import (
	"github.com/prometheus/client_golang/prometheus"

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

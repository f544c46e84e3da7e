package lrs

import (
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrs "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
)

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

// statsName is the name a cluster's stats are kept under: the EDS service name, which is
// krteds' cluster name, else the cluster name.
func statsName(cs *endpoint.ClusterStats) string {
	if n := cs.GetClusterServiceName(); n != "" {
		return n
	}
	return cs.GetClusterName()
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

// localityLabel renders a locality as region/zone/subzone.
func localityLabel(l *core.Locality) string {
	return clip(l.GetRegion() + "/" + l.GetZone() + "/" + l.GetSubZone())
}

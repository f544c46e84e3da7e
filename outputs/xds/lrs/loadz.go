package lrs

import (
	"context"
	"slices"
	"time"
)

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

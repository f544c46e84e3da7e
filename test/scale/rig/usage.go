package rig

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Usage is a replica's CPU time, RSS and live heap (Go's accounting, from its metrics).
type Usage struct {
	PID  int
	CPU  time.Duration
	RSS  int64
	Heap int64
	// Pending is the replica's slice endpoints waiting for the Pod they name
	// (pilot_k8s_endpoints_pending_pod).
	Pending int64
}

func (rep *Replica) Usage() Usage {
	var u Usage
	rep.r.mu.Lock()
	pid := rep.cmd.Process.Pid
	rep.r.mu.Unlock()
	u.PID = pid
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		if len(f) > 13 {
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			u.CPU = time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ 100)
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				u.RSS = n << 10
			}
		}
	}
	c := http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get("http://" + rep.Debug + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				u.Heap = int64(f)
			}
			if v, ok := strings.CutPrefix(sc.Text(), "pilot_k8s_endpoints_pending_pod "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				u.Pending = int64(f)
			}
		}
		resp.Body.Close()
	}
	return u
}

// Convergence reads the replica's histogram of its own part of a change (an input change to the
// response carrying it: krteds_xds_convergence_seconds for CLAs), as cumulative counts by upper
// bound; nil when the replica does not answer.
func (rep *Replica) Convergence() map[float64]float64 {
	return rep.histogram(`krteds_xds_convergence_seconds_bucket{type="ClusterLoadAssignment",le="`)
}

// Programming reads the replica's network programming latency of slice changes, trigger → ACK
// (krteds_network_programming_duration_seconds, stage total), as convergence does.
func (rep *Replica) Programming() map[float64]float64 { return rep.ProgrammingStage("total") }

// ProgrammingStage reads one stage of the replica's network programming latency of the changes
// whose trigger time is a Pod's readiness, stamped on a slice by the EndpointSlice controller or
// read off the Pod (kind EndpointSlice and Pod, summed): what the rig measures from the stamps.
func (rep *Replica) ProgrammingStage(stage string) map[float64]float64 {
	out := rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="EndpointSlice",stage="` + stage + `",le="`)
	for b, n := range rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="Pod",stage="` + stage + `",le="`) {
		out[b] += n
	}
	return out
}

// ProgrammingKind reads the network programming latency, trigger → ACK, of the changes whose
// trigger is of one kind.
func (rep *Replica) ProgrammingKind(kind string) map[float64]float64 {
	return rep.histogram(`krteds_network_programming_duration_seconds_bucket{kind="` + kind + `",stage="total",le="`)
}

// histogram reads the buckets of one series of the replica's metrics whose lines start with
// prefix (up to the bound), as cumulative counts by upper bound; nil when it does not answer.
func (rep *Replica) histogram(prefix string) map[float64]float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + rep.Debug + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		b, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 == nil && err2 == nil {
			out[b] = n
		}
	}
	return out
}

// HistogramQuantile is the upper bound of the bucket holding quantile q of the counts added
// between two readings of a cumulative histogram (from may be nil: a process started since), and
// the number of observations.
func HistogramQuantile(from, to map[float64]float64, q float64) (bound float64, n float64) {
	bounds := make([]float64, 0, len(to))
	for b := range to {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, 0
	}
	reset := false
	for b, c := range from {
		if to[b] < c {
			reset = true
		}
	}
	delta := func(b float64) float64 {
		if reset || from == nil {
			return to[b]
		}
		return to[b] - from[b]
	}
	n = delta(bounds[len(bounds)-1])
	for _, b := range bounds {
		if n > 0 && delta(b) >= q*n {
			return b, n
		}
	}
	return bounds[len(bounds)-1], n
}

// SelfCPU is the CPU the rig's own process (the clients and the judge) has used.
func SelfCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	if len(f) <= 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100
}

// sample is one reading of a replica's usage.
type sample struct {
	at time.Time
	Usage
}

// SampleUsage reads every replica's usage every second until the test ends.
func (r *Rig) SampleUsage() {
	stop := make(chan struct{})
	done := make(chan struct{})
	r.T.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				for i, rep := range r.Replicas {
					u := rep.Usage()
					r.mu.Lock()
					for len(r.samples) <= i {
						r.samples = append(r.samples, nil)
					}
					r.samples[i] = append(r.samples[i], sample{at: now, Usage: u})
					r.mu.Unlock()
				}
			}
		}
	}()
}

// Window is a replica's usage over [from, to]: CPU used (in cores: seconds of CPU per second),
// and the peak RSS and heap sampled.
type Window struct {
	Cores             float64
	PeakRSS, PeakHeap int64
	// PeakPending is the most slice endpoints sampled waiting for their Pod.
	PeakPending int64
	// Samples is the readings in the window.
	Samples int
}

func (r *Rig) UsageOver(i int, from, to time.Time) Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w Window
	var cpu time.Duration
	var prev *sample
	for k := range r.samples[i] {
		s := &r.samples[i][k]
		if s.RSS == 0 {
			continue // the process was gone
		}
		if s.at.Before(from) || s.at.After(to) {
			if s.at.Before(from) {
				prev = s
			}
			continue
		}
		w.Samples++
		w.PeakRSS, w.PeakHeap, w.PeakPending = max(w.PeakRSS, s.RSS), max(w.PeakHeap, s.Heap), max(w.PeakPending, s.Pending)
		switch {
		case prev == nil:
		case prev.PID != s.PID:
			cpu += s.CPU // a new process: all its CPU is in the window
		default:
			cpu += s.CPU - prev.CPU
		}
		prev = s
	}
	if d := to.Sub(from); d > 0 {
		w.Cores = cpu.Seconds() / d.Seconds()
	}
	return w
}

// Busy is the machine's CPU time, all cores, busy and in all, from /proc/stat.
func Busy() (busyTicks, allTicks int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for k, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		allTicks += n
		if k != 3 && k != 4 { // idle, iowait
			busyTicks += n
		}
	}
	return busyTicks, allTicks
}

package rig

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// profile, when KRTEDS_SCALE_PROFILE is set, takes CPU profiles of the rig's own process and of
// every replica but skip (one about to be stopped: a profile in progress holds its debug server
// open) for the next d, into the rig's folder (kept with KRTEDS_SCALE_KEEP) as
// <name>-rig.pprof and <name>-krteds-<i>.pprof, and returns at once; the returned func waits for
// them. It is how a scenario's time is apportioned between krteds and the clients judging it.
func (r *Rig) Profile(name string, d time.Duration, skip int) (wait func()) {
	if os.Getenv("KRTEDS_SCALE_PROFILE") == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	if f, err := os.Create(filepath.Join(r.Dir, name+"-rig.pprof")); err == nil {
		if err := pprof.StartCPUProfile(f); err == nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(d)
				pprof.StopCPUProfile()
				_ = f.Close()
			}()
		} else {
			_ = f.Close()
		}
	}
	for i, rep := range r.Replicas {
		if i == skip {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := http.Client{Timeout: d + 10*time.Second}
			resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", rep.Debug, int(d.Seconds())))
			if err != nil {
				r.T.Logf("profiling krteds-%d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(r.Dir, fmt.Sprintf("%s-krteds-%d.pprof", name, i)))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		}()
	}
	return wg.Wait
}

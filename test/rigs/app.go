package rigs

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/test/fixtures"
)

// App is the process layer's rig in process: krteds' app (app.Start, what `krteds serve` runs),
// its ports on loopback, stopped with the test.
type App struct {
	*app.App
	// XDSAddr is the ADS address; DebugAddr the debug server's ("" without one).
	XDSAddr, DebugAddr string
	tb                 testing.TB
}

// StartApp starts the app with o, its xDS port on loopback where o gives no listener. It has a
// debug server where o gives it a listener (Listen), as `krteds serve` has one.
func StartApp(tb testing.TB, o app.Options) *App {
	tb.Helper()
	if o.XDSListener == nil {
		o.XDSListener = Listen(tb)
	}
	a, err := app.Start(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.Stop)
	r := &App{App: a, XDSAddr: o.XDSListener.Addr().String(), tb: tb}
	if o.DebugListener != nil {
		r.DebugAddr = o.DebugListener.Addr().String()
	}
	return r
}

// Listen listens on a free loopback port.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// AwaitReady waits until /ready answers 200.
func (r *App) AwaitReady() {
	r.tb.Helper()
	fixtures.Polling("/ready is an HTTP endpoint, and the server marks itself ready from a goroutine of its own").
		Await(r.tb, Timeout, "/ready to answer 200", func() (bool, string) {
			code, body := r.Get("/ready")
			return code == http.StatusOK, fmt.Sprint(code, " ", body)
		})
}

// AwaitSynced waits until the app's graph has synced: the return of its WaitUntilSynced wakes the
// wait.
func (r *App) AwaitSynced() {
	r.tb.Helper()
	var synced atomic.Bool
	w := fixtures.NewWaker()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		synced.Store(r.WaitUntilSynced(stop))
		w.Wake()
	}()
	w.Await(r.tb, Timeout, "the app's graph to sync", func() (bool, string) { return synced.Load(), "not synced" })
}

// Get GETs a path of the debug server, returning the status and the body (0 and the error when
// the request fails).
func (r *App) Get(path string) (int, string) {
	resp, err := http.Get("http://" + r.DebugAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(b)
}

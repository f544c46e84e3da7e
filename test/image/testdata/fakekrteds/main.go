// Command fakekrteds stands in for krteds where the checker's own tests run an image: it answers
// `version --json` with the version and commit it was built with, and `serve --demo` as krteds
// does (a folder made under the temporary directory, /ready and /version on --debug-addr, exit 0
// on SIGTERM). FAKE_FAIL=serve makes serve exit 1 at once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

var version, commit = "", ""

func main() {
	if len(os.Args) < 2 {
		os.Exit(2)
	}
	info := map[string]string{"version": version, "commit": commit}
	switch os.Args[1] {
	case "version":
		_ = json.NewEncoder(os.Stdout).Encode(info)
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ExitOnError)
		_ = fs.Bool("demo", false, "")
		_ = fs.String("xds-addr", "", "")
		debug := fs.String("debug-addr", "", "")
		_ = fs.Duration("drain-duration", 0, "")
		_ = fs.Parse(os.Args[2:])
		if os.Getenv("FAKE_FAIL") == "serve" {
			os.Exit(1)
		}
		if _, err := os.MkdirTemp("", "krteds-demo-"); err != nil {
			fmt.Fprintln(os.Stderr, "--demo:", err)
			os.Exit(1)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/ready", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(info) })
		srv := &http.Server{Addr: *debug, Handler: mux}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		os.Exit(2)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

type statusOptions struct {
	debug     string
	onlyStale bool
	output    string
	timeout   time.Duration
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the proxies behind what krteds would send them, and why",
		Long: `status asks a running krteds which connected proxies do not hold what it would send them now,
per resource type: since when (the oldest change or request not yet acknowledged), how many
names, and what each waits on:

  waiting_for_the_send_budget   its next response waits for a place in the send budget (lane)
  client_not_reading            the client reads nothing of the response handed to it
  being_written                 the response is being written; the client reads it
  not_acknowledged              the client was sent a response and has not acknowledged it
  waiting_for_the_stream_rate   the stream waits for its turn of the stream rate
  queued_behind_another_type    a response of another type goes first
  waiting_for_sync              krteds has not synced its inputs or the proxy's view yet
  waiting_for_clusters          emptied CLAs wait for the clusters response removing them
  being_computed                what the proxy subscribes to is being computed
  rejected                      the client rejected the last response (its error is shown)

STALE marks those behind for longer than krteds' --stale-threshold; istioctl proxy-status shows
them STALE too.`,
		Example: `  krteds status
  krteds status --stale -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "table" && o.output != "json" {
				return fmt.Errorf("-o %q: want table or json", o.output)
			}
			return runStatus(o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.debug, "debug", "localhost:15014", "address of krteds' debug port (it answers loopback clients)")
	f.BoolVar(&o.onlyStale, "stale", false, "only the proxies behind for longer than the stale threshold")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for krteds")
	return cmd
}

func runStatus(o *statusOptions, out io.Writer) error {
	path := "/debug/staleness"
	if o.onlyStale {
		path += "?stale=1"
	}
	body, err := askDebug(o.debug, path, o.timeout)
	if err != nil {
		return err
	}
	if o.output == "json" {
		_, err := out.Write(body)
		return err
	}
	var s xdsdebug.Staleness
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("decoding krteds' answer: %w", err)
	}
	printStaleness(out, s)
	return nil
}

// printStaleness writes the proxies behind as a table, oldest first.
func printStaleness(w io.Writer, s xdsdebug.Staleness) {
	fmt.Fprintf(w, "%d proxies connected; %d types behind, %d stale\n", s.Proxies, len(s.Behind), s.Stale)
	if len(s.Behind) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROXY\tTYPE\tBEHIND\tNAMES\tWAITING ON\tSTALE")
	for _, b := range s.Behind {
		reason := b.Reason
		if b.Lane != "" {
			reason += " (" + b.Lane + " lane)"
		}
		if b.LastError != "" {
			reason += ": " + b.LastError
		}
		stale := ""
		if b.Stale {
			stale = "STALE"
		}
		t := b.Type[strings.LastIndexByte(b.Type, '.')+1:]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", b.Proxy, t, (time.Duration(b.Seconds * float64(time.Second))).Round(time.Millisecond), b.Names, reason, stale)
	}
	_ = tw.Flush()
}

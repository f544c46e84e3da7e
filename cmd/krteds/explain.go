package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/outputs/history"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/transforms"
)

type explainOptions struct {
	endpointsOptions
	debug    string
	proxy    string
	cluster  string
	endpoint string
	history  bool
}

func newExplainCommand() *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Say why each endpoint of a cluster is, or is not, sent to a proxy",
		Long: `explain asks a running krteds why the endpoints of a cluster are, or are not, in the
ClusterLoadAssignment a proxy is sent: for each endpoint Kubernetes knows for the service, the
facts read on the way (the EndpointSlice and its conditions, the targetRef Pod, the port, the
subset's labels, the proxy's node, network and namespace), each naming the object that decided
it, and the verdict: sent (health, locality, priority, weight, and whether it carries tlsMode
metadata, with the DestinationRule or PeerAuthentication that decided it) or not sent, with the
first rule that left it out. The verdict "sent" is read from the CLA krteds serves that proxy.

With --history it also says when: the changes krteds recorded of the service's endpoints (of
--endpoint's only, if given): the change behind each (an EndpointSlice's trigger time, the Pod
or Service change the EndpointSlice controller stamps), when krteds saw it and computed the
CLA, how many proxies acknowledged it and which rejected it; a Pod of the endpoint seen being
deleted or gone; and where every proxy subscribed to the cluster stands now: those holding an
older CLA, how many changes behind, and what they wait on (the send budget, a client not
reading, an answer not acknowledged, a rejection).

With --proxy it explains for a proxy connected to krteds (its node id, <pod>.<namespace>,
connection id, or, as istiod takes it, a part of <pod>.<namespace> that names one proxy).
Without, it connects to --xds as the proxy --node-id names (as krteds endpoints does), asks for
the cluster, and explains for that connection.`,
		Example: `  krteds explain --cluster 'outbound|9080||reviews.shop.svc.cluster.local' --endpoint 10.10.1.15
  krteds explain --proxy productpage-v1-abc.shop --cluster 'outbound|9080|v1|reviews.shop.svc.cluster.local'
  krteds explain --proxy productpage-v1-abc.shop --cluster 'outbound|9080||reviews.shop.svc.cluster.local' --endpoint 10.10.1.15 --history`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, _, ok := transforms.ParseClusterName(o.cluster); !ok {
				return fmt.Errorf("--cluster %q: want an EDS cluster name, outbound|<port>|<subset>|<hostname>", o.cluster)
			}
			if o.output != "text" && o.output != "json" {
				return fmt.Errorf("-o %q: want text or json", o.output)
			}
			return runExplain(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.debug, "debug", "localhost:15014", "address of krteds' debug port (it answers loopback clients)")
	f.StringVar(&o.proxy, "proxy", "", "a proxy connected to krteds: node id, <pod>.<namespace> (or a part naming one proxy) or connection id (default: connect as --node-id)")
	f.StringVar(&o.cluster, "cluster", "", "the EDS cluster, outbound|<port>|<subset>|<hostname> (required)")
	f.StringVar(&o.endpoint, "endpoint", "", "only this endpoint address (default: every endpoint the service has)")
	f.BoolVar(&o.history, "history", false, "also say when each recorded change happened, reached the proxies, and where each proxy subscribed to the cluster stands")
	f.StringVar(&o.xds, "xds", "localhost:15010", "address of krteds' xDS port, to connect as --node-id")
	f.StringVar(&o.nodeID, "node-id", "sidecar~127.0.0.1~krteds-cli.default~default.svc.cluster.local", "node id to connect as, without --proxy")
	f.StringVar(&o.generator, "generator", "", "node metadata GENERATOR (grpc for a proxyless client), without --proxy")
	f.StringVar(&o.network, "network", "", "node metadata NETWORK, without --proxy")
	f.StringVar(&o.clusterID, "cluster-id", "", "node metadata CLUSTER_ID, without --proxy")
	f.StringVar(&o.locality, "locality", "", "node locality, region/zone/subzone, without --proxy")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for krteds")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

func runExplain(ctx context.Context, o *explainOptions, out io.Writer) error {
	proxy := o.proxy
	if proxy == "" {
		node := o.endpointsOptions
		node.output = "table" // the node flags are endpoints'; -o is explain's own
		if err := node.validate(); err != nil {
			return err
		}
		// Connect as the proxy and hold the stream while krteds explains: krteds computes a
		// proxy's view only while it is connected.
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cc, s, err := openAsProxy(sctx, &node)
		if err != nil {
			return err
		}
		defer cc.Close()
		defer s.Close()
		if err := s.Request(adsclient.TypeCLA, o.cluster); err != nil {
			return err
		}
		if _, err := s.Recv(o.timeout); err != nil {
			if errors.Is(err, adsclient.ErrTimeout) {
				return fmt.Errorf("no answer from %s within %s", o.xds, o.timeout)
			}
			return explainDial(o.xds, err)
		}
		proxy = o.nodeID
	}
	q := url.Values{"proxyID": {proxy}, "cluster": {o.cluster}}
	if o.endpoint != "" {
		q.Set("endpoint", o.endpoint)
	}
	if o.history {
		q.Set("history", "1")
	}
	body, err := askDebug(o.debug, "/debug/explain?"+q.Encode(), o.timeout)
	if err != nil {
		return err
	}
	if o.output == "json" {
		_, err := out.Write(body)
		return err
	}
	var ex struct {
		explain.Explanation
		History *history.Timeline `json:"history"`
	}
	if err := json.Unmarshal(body, &ex); err != nil {
		return fmt.Errorf("decoding krteds' answer: %w", err)
	}
	printExplanation(out, ex.Explanation)
	if ex.History != nil {
		fmt.Fprintf(out, "\n%s", ex.History.Text())
	}
	return nil
}

// printExplanation writes an explanation as text: the facts about the proxy and the service,
// then one block per endpoint, its verdict first.
func printExplanation(w io.Writer, ex explain.Explanation) {
	fmt.Fprintf(w, "cluster %s\n", ex.Cluster)
	for _, f := range ex.Facts {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if ex.Verdict != "" {
		fmt.Fprintf(w, "%s\n", ex.Verdict)
		return
	}
	if len(ex.Endpoints) == 0 {
		fmt.Fprintln(w, "the service has no endpoints")
		return
	}
	for _, v := range ex.Endpoints {
		fmt.Fprintln(w)
		if v.Sent {
			fmt.Fprintf(w, "%s: sent, %s, locality %q, priority %d, weight %d\n", v.Address, v.Health, v.Locality, v.Priority, v.Weight)
		} else {
			fmt.Fprintf(w, "%s: not sent: %s\n", v.Address, v.Reason)
		}
		for _, f := range v.Facts {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
}

// askDebug GETs a path of krteds' debug port and returns its answer (at most 64 MiB); an answer
// other than 200 is an error carrying its text.
func askDebug(debug, path string, timeout time.Duration) ([]byte, error) {
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Get("http://" + debug + path)
	if err != nil {
		return nil, fmt.Errorf("asking krteds' debug port %s: %w", debug, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("krteds answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

type endpointsOptions struct {
	xds       string
	nodeID    string
	namespace string
	locality  string
	clusters  []string
	status    string
	output    string
	generator string
	network   string
	clusterID string
	timeout   time.Duration
}

// endpointRow is one line of `krteds endpoints`.
type endpointRow struct {
	Endpoint string `json:"endpoint"`
	Status   string `json:"status"`
	Locality string `json:"locality"`
	Priority uint32 `json:"priority"`
	Weight   uint32 `json:"weight"`
	Cluster  string `json:"cluster"`
}

func newEndpointsCommand() *cobra.Command {
	o := &endpointsOptions{}
	cmd := &cobra.Command{
		Use:   "endpoints",
		Short: "Connect to an xDS server as a proxy and print the endpoints it is sent",
		Long: `endpoints connects to an xDS server (krteds or istiod) as the proxy named by --node-id and
prints the endpoints of every cluster it is sent, like istioctl proxy-config endpoints. Without
--cluster it asks for all clusters (CDS) first, then for their endpoints (EDS).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, err := fetchEndpoints(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printEndpoints(cmd.OutOrStdout(), rows, o.output)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.xds, "xds", "localhost:15010", "address of the xDS server")
	f.StringVar(&o.nodeID, "node-id", "sidecar~127.0.0.1~krteds-cli.default~default.svc.cluster.local", "node id to connect as")
	f.StringVar(&o.namespace, "namespace", "", "node metadata NAMESPACE (default: from the node id)")
	f.StringVar(&o.locality, "locality", "", "node locality, region/zone/subzone")
	f.StringSliceVar(&o.clusters, "cluster", nil, "only these clusters (repeatable); default: every cluster CDS lists")
	f.StringVar(&o.status, "status", "", "only endpoints with this health status (HEALTHY, UNHEALTHY, DRAINING)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&o.generator, "generator", "", "node metadata GENERATOR (grpc for a proxyless client)")
	f.StringVar(&o.network, "network", "", "node metadata NETWORK: the proxy's network")
	f.StringVar(&o.clusterID, "cluster-id", "", "node metadata CLUSTER_ID: the proxy's cluster")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for the server")
	return cmd
}

func parseLocality(s string) *core.Locality {
	if s == "" {
		return nil
	}
	p := strings.SplitN(s, "/", 3)
	l := &core.Locality{Region: p[0]}
	if len(p) > 1 {
		l.Zone = p[1]
	}
	if len(p) > 2 {
		l.SubZone = p[2]
	}
	return l
}

func fetchEndpoints(ctx context.Context, o *endpointsOptions) ([]endpointRow, error) {
	if o.output != "table" && o.output != "json" {
		return nil, fmt.Errorf("-o %q: want table or json", o.output)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cc, err := adsclient.Dial(o.xds)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	s, err := adsclient.Open(ctx, cc, adsclient.Node{ID: o.nodeID, Namespace: o.namespace, Generator: o.generator,
		Network: o.network, ClusterID: o.clusterID, Locality: parseLocality(o.locality)})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	recv := func() (*discovery.DiscoveryResponse, error) {
		deadline, _ := ctx.Deadline()
		r, err := s.Recv(time.Until(deadline))
		if errors.Is(err, adsclient.ErrTimeout) {
			return nil, fmt.Errorf("no answer from %s within %s", o.xds, o.timeout)
		}
		if err != nil {
			return nil, fmt.Errorf("xDS stream to %s: %w", o.xds, err)
		}
		return r, nil
	}

	names := slices.Clone(o.clusters)
	if len(names) == 0 {
		if err := s.Request(adsclient.TypeCluster); err != nil {
			return nil, err
		}
		resp, err := recv()
		if err != nil {
			return nil, err
		}
		clusters, err := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
		if err != nil {
			return nil, err
		}
		for _, c := range clusters {
			if c.GetType() != cluster.Cluster_EDS {
				continue
			}
			n := c.GetEdsClusterConfig().GetServiceName()
			if n == "" {
				n = c.GetName()
			}
			names = append(names, n)
		}
		if err := s.Ack(resp); err != nil {
			return nil, err
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	if err := s.Request(adsclient.TypeCLA, names...); err != nil {
		return nil, err
	}
	var rows []endpointRow
	got := map[string]bool{}
	for len(got) < len(names) {
		resp, err := recv()
		if err != nil {
			return nil, err
		}
		if resp.TypeUrl != adsclient.TypeCLA {
			continue
		}
		clas, err := adsclient.CLAs(resp)
		if err != nil {
			return nil, err
		}
		for _, cla := range clas {
			if got[cla.ClusterName] {
				continue
			}
			got[cla.ClusterName] = true
			for _, l := range cla.Endpoints {
				loc := strings.TrimRight(strings.Join([]string{l.GetLocality().GetRegion(), l.GetLocality().GetZone(), l.GetLocality().GetSubZone()}, "/"), "/")
				for _, e := range l.LbEndpoints {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					row := endpointRow{
						Endpoint: netip.AddrPortFrom(netip.MustParseAddr(sa.GetAddress()), uint16(sa.GetPortValue())).String(),
						Status:   e.GetHealthStatus().String(),
						Locality: loc,
						Priority: l.GetPriority(),
						Weight:   e.GetLoadBalancingWeight().GetValue(),
						Cluster:  cla.ClusterName,
					}
					if o.status == "" || strings.EqualFold(o.status, row.Status) {
						rows = append(rows, row)
					}
				}
			}
		}
		if err := s.Ack(resp, names...); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(rows, func(a, b endpointRow) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		if a.Priority != b.Priority {
			return int(a.Priority) - int(b.Priority)
		}
		return netip.MustParseAddrPort(a.Endpoint).Compare(netip.MustParseAddrPort(b.Endpoint))
	})
	return rows, nil
}

func printEndpoints(w io.Writer, rows []endpointRow, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []endpointRow{}
		}
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tLOCALITY\tPRIORITY\tWEIGHT\tCLUSTER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.Endpoint, r.Status, r.Locality, r.Priority, r.Weight, r.Cluster)
	}
	return tw.Flush()
}

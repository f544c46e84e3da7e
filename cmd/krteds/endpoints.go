package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

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
	watch     bool
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

// endpointStatuses are the health statuses --status accepts (Envoy's names).
var endpointStatuses = []string{"HEALTHY", "UNHEALTHY", "DRAINING", "TIMEOUT", "DEGRADED", "UNKNOWN"}

// validate checks the flags before connecting.
func (o *endpointsOptions) validate() error {
	switch o.output {
	case "table", "json", "yaml", "raw":
	default:
		return fmt.Errorf("-o %q: want table, json, yaml or raw", o.output)
	}
	if o.status != "" && !slices.Contains(endpointStatuses, strings.ToUpper(o.status)) {
		return fmt.Errorf("--status %q: want one of %s", o.status, strings.Join(endpointStatuses, ", "))
	}
	if o.locality != "" {
		p := strings.Split(o.locality, "/")
		if len(p) > 3 || p[0] == "" {
			return fmt.Errorf("--locality %q: want region[/zone[/subzone]]", o.locality)
		}
	}
	parts := strings.Split(o.nodeID, "~")
	if len(parts) != 4 || parts[1] == "" {
		return fmt.Errorf("--node-id %q: want <type>~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>", o.nodeID)
	}
	if _, ns, ok := strings.Cut(parts[2], "."); ok && o.namespace != "" && ns != o.namespace {
		return fmt.Errorf("--namespace %s disagrees with the node id's namespace %s", o.namespace, ns)
	}
	return nil
}

// explainDial words the errors of pointing the client at something that is not an xDS server.
func explainDial(addr string, err error) error {
	msg := err.Error()
	for _, sign := range []string{"frame too large", "server preface", "malformed HTTP", "http2: ", "unexpected EOF"} {
		if strings.Contains(msg, sign) {
			return fmt.Errorf("%s does not answer gRPC (is it the debug port? krteds serves xDS on 15010): %w", addr, err)
		}
	}
	if strings.Contains(msg, "connection refused") {
		return fmt.Errorf("nothing listens on %s (krteds serves xDS on 15010 by default): %w", addr, err)
	}
	return err
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
			if err := o.validate(); err != nil {
				return err
			}
			return fetchEndpoints(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.xds, "xds", "localhost:15010", "address of the xDS server")
	f.StringVar(&o.nodeID, "node-id", "sidecar~127.0.0.1~krteds-cli.default~default.svc.cluster.local", "node id to connect as")
	f.StringVar(&o.namespace, "namespace", "", "node metadata NAMESPACE (default: from the node id)")
	f.StringVar(&o.locality, "locality", "", "node locality, region/zone/subzone")
	f.StringSliceVar(&o.clusters, "cluster", nil, "only these clusters (repeatable); default: every cluster CDS lists")
	f.StringVar(&o.status, "status", "", "only endpoints with this health status (HEALTHY, UNHEALTHY, DRAINING, or UNKNOWN: none set, as for ServiceEntry and WorkloadEntry endpoints)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json, yaml, or raw (the ClusterLoadAssignments as protojson)")
	f.BoolVarP(&o.watch, "watch", "w", false, "keep the stream open and print the endpoints again each time they change")
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

// openAsProxy connects to the xDS server as the proxy the node flags describe; closing the
// connection ends the stream.
func openAsProxy(ctx context.Context, o *endpointsOptions) (*grpc.ClientConn, *adsclient.Stream, error) {
	cc, err := adsclient.Dial(o.xds)
	if err != nil {
		return nil, nil, explainDial(o.xds, err)
	}
	s, err := adsclient.Open(ctx, cc, adsclient.Node{ID: o.nodeID, Namespace: o.namespace, Generator: o.generator,
		Network: o.network, ClusterID: o.clusterID, Locality: parseLocality(o.locality)})
	if err != nil {
		_ = cc.Close()
		return nil, nil, explainDial(o.xds, err)
	}
	return cc, s, nil
}

func fetchEndpoints(ctx context.Context, o *endpointsOptions, out, errOut io.Writer) error {
	openCtx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen()
	cc, s, err := openAsProxy(openCtx, o)
	if err != nil {
		return err
	}
	defer cc.Close()
	defer s.Close()
	deadline := time.Now().Add(o.timeout)
	recv := func(wait time.Duration) (*discovery.DiscoveryResponse, error) {
		r, err := s.Recv(wait)
		if errors.Is(err, adsclient.ErrTimeout) {
			return nil, fmt.Errorf("no answer from %s within %s", o.xds, o.timeout)
		}
		if err != nil {
			return nil, explainDial(o.xds, fmt.Errorf("xDS stream to %s: %w", o.xds, err))
		}
		return r, nil
	}

	// The clusters the server lists (CDS): every one without --cluster; with it, to say which
	// asked-for names the server does not list.
	if err := s.Request(adsclient.TypeCluster); err != nil {
		return err
	}
	resp, err := recv(time.Until(deadline))
	if err != nil {
		return err
	}
	clusters, err := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
	if err != nil {
		return err
	}
	var listed []string
	for _, c := range clusters {
		if c.GetType() != cluster.Cluster_EDS {
			continue
		}
		n := c.GetEdsClusterConfig().GetServiceName()
		if n == "" {
			n = c.GetName()
		}
		listed = append(listed, n)
	}
	if err := s.Ack(resp); err != nil {
		return err
	}
	names := slices.Clone(o.clusters)
	for _, n := range names {
		if !slices.Contains(listed, n) {
			fmt.Fprintf(errOut, "note: the server lists no EDS cluster %s (unknown, not visible to this proxy, or resolved by DNS): it sends what it sends for such a name\n", n)
		}
	}
	if len(names) == 0 {
		names = listed
	}
	if len(names) == 0 {
		return printEndpoints(out, nil, nil, o.output)
	}
	slices.Sort(names)
	if err := s.Request(adsclient.TypeCLA, names...); err != nil {
		return err
	}
	latest := map[string]*endpoint.ClusterLoadAssignment{}
	for {
		wait := time.Until(deadline)
		if len(latest) == len(names) && o.watch {
			wait = 24 * time.Hour
		}
		resp, err := recv(wait)
		if err != nil {
			return err
		}
		if resp.TypeUrl != adsclient.TypeCLA {
			continue
		}
		clas, err := adsclient.CLAs(resp)
		if err != nil {
			return err
		}
		for _, cla := range clas {
			latest[cla.ClusterName] = cla
		}
		if err := s.Ack(resp, names...); err != nil {
			return err
		}
		if len(latest) < len(names) {
			continue
		}
		if o.watch {
			fmt.Fprintf(out, "# %s version %s\n", time.Now().Format(time.RFC3339Nano), resp.VersionInfo)
		}
		all := make([]*endpoint.ClusterLoadAssignment, 0, len(names))
		for _, n := range names {
			all = append(all, latest[n])
		}
		if err := printEndpoints(out, endpointRows(all, o.status), all, o.output); err != nil {
			return err
		}
		if !o.watch {
			return nil
		}
	}
}

// endpointRows flattens CLAs into rows (only those of status, when set), sorted by cluster,
// priority, then address.
func endpointRows(clas []*endpoint.ClusterLoadAssignment, status string) []endpointRow {
	var rows []endpointRow
	for _, cla := range clas {
		for _, l := range cla.Endpoints {
			loc := strings.TrimRight(strings.Join([]string{l.GetLocality().GetRegion(), l.GetLocality().GetZone(), l.GetLocality().GetSubZone()}, "/"), "/")
			for _, e := range l.LbEndpoints {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				row := endpointRow{
					// A hostname (a DNS endpoint from another server) prints as it is.
					Endpoint: net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))),
					Status:   e.GetHealthStatus().String(),
					Locality: loc,
					Priority: l.GetPriority(),
					Weight:   e.GetLoadBalancingWeight().GetValue(),
					Cluster:  cla.ClusterName,
				}
				if status == "" || strings.EqualFold(status, row.Status) {
					rows = append(rows, row)
				}
			}
		}
	}
	slices.SortFunc(rows, func(a, b endpointRow) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		if a.Priority != b.Priority {
			return int(a.Priority) - int(b.Priority)
		}
		pa, ea := netip.ParseAddrPort(a.Endpoint)
		pb, eb := netip.ParseAddrPort(b.Endpoint)
		if ea == nil && eb == nil {
			return pa.Compare(pb)
		}
		return strings.Compare(a.Endpoint, b.Endpoint)
	})
	return rows
}

func printEndpoints(w io.Writer, rows []endpointRow, clas []*endpoint.ClusterLoadAssignment, format string) error {
	if rows == nil {
		rows = []endpointRow{}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "yaml":
		b, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "raw":
		for _, cla := range clas {
			b, err := protojson.MarshalOptions{Multiline: true}.Marshal(cla)
			if err != nil {
				return err
			}
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tLOCALITY\tPRIORITY\tWEIGHT\tCLUSTER")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.Endpoint, r.Status, r.Locality, r.Priority, r.Weight, r.Cluster)
	}
	return tw.Flush()
}

// Command krteds is an in-cluster xDS server that serves Envoy and proxyless gRPC clients the
// EDS ClusterLoadAssignments istiod would serve them, computed as a graph of krt collections.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "krteds:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "krteds",
		Short:         "An xDS server for Kubernetes endpoints, built as a graph of krt collections",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newEndpointsCommand(), newGraphCommand(), newVersionCommand())
	return root
}

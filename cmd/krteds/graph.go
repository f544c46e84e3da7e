package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs"
)

func newGraphCommand() *cobra.Command {
	var debugAddr, output string
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "Print the live collection graph of a running krteds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := "json"
			if output == "dot" {
				format = "dot"
			} else if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text, dot or json", output)
			}
			url := "http://" + strings.TrimPrefix(debugAddr, "http://") + "/debug/krt?format=" + format
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Get(url)
			if err != nil {
				return fmt.Errorf("reading the graph: %w", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("reading the graph: %w", err)
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("reading the graph: %s: %s", resp.Status, strings.TrimSpace(string(body)))
			}
			if output != "text" {
				_, err = cmd.OutOrStdout().Write(body)
				return err
			}
			var s graphs.Snapshot
			if err := json.Unmarshal(body, &s); err != nil {
				return fmt.Errorf("decoding the graph: %w", err)
			}
			_, err = io.WriteString(cmd.OutOrStdout(), outputs.Text(s))
			return err
		},
	}
	cmd.Flags().StringVar(&debugAddr, "debug", "localhost:15014", "debug address of the running krteds")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text, dot or json")
	return cmd
}

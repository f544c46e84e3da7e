package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/krteds/krteds/outputs"
)

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print krteds' version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := outputs.Build()
			if asJSON {
				out, err := json.Marshal(b)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return nil
			}
			modified := ""
			if b.Modified {
				modified = " (modified)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "krteds %s\ncommit %s%s\n%s\n", b.Version, b.Commit, modified, b.GoVersion)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON (the shape of /version)")
	return cmd
}

package main

import "github.com/spf13/cobra"

// newDemoCmd groups runnable demonstrations.
func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Runnable demonstrations of leasegate's guarantees"}
}

package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/client"
)

func descFields(d client.Description) []field {
	return []field{
		{"NAME", "name", d.Name},
		{"HELD", "held", d.Held},
		{"HOLDER", "holderClientId", d.HolderClientID},
		{"TOKEN", "fencingToken", d.Token},
		{"LIMIT", "limit", d.Limit},
		{"HOLDERS", "holders", len(d.Holders)},
		{"WAITERS", "waiters", d.Waiters},
		{"DELAY UNTIL", "delayUntil", d.DelayUntil},
		{"TTL", "ttlMs", d.TTL},
		{"EXPIRES", "holderExpiresAt", d.HolderExpires},
		{"SHARD", "shard", d.Shard},
	}
}

func newDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a lock's holder, fencing token, queue length and shard",
		Long: `describe shows who holds NAME (the holder's client id, fencing token, TTL and
lease expiry on the gateway's clock), how many waiters queue behind the holder,
and the shard (etcd cluster) the name lives on.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.show(cmd.Context(), func(ctx context.Context, c *client.Client) ([]field, error) {
				d, err := c.Describe(ctx, args[0])
				return descFields(d), err
			})
		},
	}
}

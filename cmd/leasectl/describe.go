package main

import (
	"context"
	"time"

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
			return g.call(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				d, err := c.Describe(ctx, args[0])
				if err != nil {
					return err
				}
				return g.printer().print(descFields(d)...)
			})
		},
	}
}

// watchState is what watch compares between polls.
type watchState struct {
	held    bool
	holder  string
	token   int64
	waiters int64
}

func newWatchCmd(g *globals) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Print a lock's holder and queue length whenever they change (by polling)",
		Long: `watch prints NAME's state like describe, then a new line whenever the holder,
its fencing token or the number of waiters changes, until interrupted.

The gateway API has no watch call, so watch polls Describe every --interval:
changes that come and go between two polls are not shown. A failed poll is
reported on stderr and retried at the next interval.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 10*time.Millisecond {
				return usagef("--interval %s: want at least 10ms", interval)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			p := g.printer()
			describe := func() (client.Description, error) {
				cctx, cancel := g.callCtx(ctx)
				defer cancel()
				return c.Describe(cctx, args[0])
			}
			d, err := describe()
			if err != nil {
				return err
			}
			last := watchState{d.Held, d.HolderClientID, d.Token, d.Waiters}
			if err := p.print(append([]field{{"TIME", "time", time.Now()}}, descFields(d)...)...); err != nil {
				return err
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			var lastErr string
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				d, err := describe()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					if msg := g.creds.explain(err).Error(); msg != lastErr {
						lastErr = msg
						cmd.PrintErrln("leasectl: " + firstLine(msg))
					}
					continue
				}
				lastErr = ""
				now := watchState{d.Held, d.HolderClientID, d.Token, d.Waiters}
				if now == last {
					continue
				}
				last = now
				if err := p.print(append([]field{{"TIME", "time", time.Now()}}, descFields(d)...)...); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to poll Describe")
	return cmd
}

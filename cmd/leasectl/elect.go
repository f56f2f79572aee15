package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/client"
)

func newElectCmd(g *globals) *cobra.Command {
	var a acquireFlags
	var value string
	cmd := &cobra.Command{
		Use:     "elect NAME [--value V] [--ttl 30s] [--wait 1m] [--grace 10s] -- CMD [ARGS...]",
		Example: `  leasectl elect scheduler --value "$(hostname):8080" --ttl 10s -- ./scheduler`,
		Short:   "Campaign in an election and run a command while leader",
		Long: `elect campaigns in election NAME with --value, waits in its FIFO queue until it
leads, then runs CMD while it leads, as run does for a lock: the leadership is
renewed in the background, and CMD is stopped (SIGTERM within --grace of an
unconfirmed deadline, SIGKILL at the deadline or at once when a gateway
reports the term lost) before another campaigner can lead. When CMD exits,
elect resigns, and the next campaigner leads. Signals, exit statuses and the
process group are run's (see "leasectl run --help").

An election name never meets a lock name: election "x" and lock "x" are
independent. "leasectl observe NAME" follows who leads.

CMD's environment carries:
  LEASEGATE_FENCING_TOKEN  the term's fencing token: send it with every write to
                           the resources the leader changes; it grows with
                           every term
  LEASEGATE_ELECTION_NAME  NAME
  LEASEGATE_LEADER_ID      the leader id (a lock id: treat it as a secret)

If no term begins within --wait, elect exits with status 3 without running
CMD.`,
		Args: func(cmd *cobra.Command, args []string) error {
			// Flags may follow NAME, so CMD must follow "--": its own
			// flags are not elect's.
			if len(args) < 2 || cmd.ArgsLenAtDash() != 1 {
				return usagef("want an election name, then -- and a command; usage: leasectl elect NAME [--value V] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			return a.supervise(g, cmd, name, fmt.Sprintf("leadership of %q", name), argv,
				func(ctx context.Context, c *client.Client, name string, opts []client.AcquireOption) (*holding, error) {
					l, err := c.Election(name).Campaign(ctx, []byte(value), opts...)
					if err != nil {
						return nil, err
					}
					return newHolding(l, l.Resign, "LEASEGATE_ELECTION_NAME="+name, "LEASEGATE_LEADER_ID="+l.ID()), nil
				})
		},
	}
	a.registerSupervised(cmd)
	cmd.Flags().StringVar(&value, "value", "", "the leader's value while it leads, as Leader and observe report it (at most 4096 bytes)")
	return cmd
}

func leaderFields(at time.Time, info *client.LeaderInfo) []field {
	leading := info != nil
	if !leading {
		info = &client.LeaderInfo{}
	}
	return []field{{"TIME", "time", at}, {"LEADING", "leading", leading}, {"LEADER", "clientId", info.ClientID},
		{"TOKEN", "fencingToken", info.Token}, {"VALUE", "value", string(info.Value)}}
}

func newLeaderCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leader NAME",
		Short: "Show an election's leader: its client id, fencing token and value",
		Long: `leader shows who leads election NAME: the leader's client id, its term's fencing
token and its value. When nobody leads it exits with status 3.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.show(cmd.Context(), func(ctx context.Context, c *client.Client) ([]field, error) {
				info, err := c.Election(args[0]).Leader(ctx)
				return leaderFields(time.Now(), info)[1:], err
			})
		},
	}
}

func newObserveCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "observe NAME",
		Short: "Print an election's leader now and on every change (from etcd watches)",
		Long: `observe prints who leads election NAME now (or that nobody does), then one line
whenever the leader or its value changes, until interrupted. It follows the
gateways' etcd watches, not polls; when a gateway fails it moves to the next
and starts again from the state then (a change that came and went meanwhile
may not be shown).

--json (or --output json) prints one JSON object per line.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := g.printer()
			p.json = p.json || asJSON
			return g.withClient(func(c *client.Client) error {
				for info, err := range c.Election(args[0]).Observe(cmd.Context()) {
					if err != nil {
						return err
					}
					if err := p.print(leaderFields(time.Now(), info)...); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line (as --output json)")
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/locks"
	"github.com/leasegate/leasegate/shard"
)

// shardsFlags are the flags every shards subcommand shares, and maxEpoch,
// which the subcommands that spend an epoch (add, remove, bump-epoch) take.
type shardsFlags struct {
	etcd     []string
	prefix   string
	timeout  time.Duration
	output   string
	maxEpoch uint16
	access   etcdAccess
}

// maxEpochFlag registers --max-epoch on a subcommand that spends an epoch.
func (f *shardsFlags) maxEpochFlag(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().Uint16Var(&f.maxEpoch, "max-epoch", shard.MaxJSONSafeEpoch, fmt.Sprintf(
		"highest epoch the change may reach, up to %d; above %d fencing tokens pass 2^53, so clients that read them as JSON numbers (JavaScript, k6, the REST API's fencingToken) must first read them as strings or 64-bit integers",
		shard.MaxEpoch, shard.MaxJSONSafeEpoch))
	return cmd
}

func newShardsCmd() *cobra.Command {
	f := &shardsFlags{}
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Show or change the shard map (the etcd clusters lock names are hashed over)",
		Long: `The shard map lives in the home etcd cluster (the first --etcd) and every gateway
follows it. Changing it moves about 1/(N+1) of the names when a cluster is added;
it never grants a name twice: see docs/operations.md.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringArrayVar(&f.etcd, "etcd", nil, "the home etcd cluster as name=url1,url2 (required)")
	pf.StringVar(&f.prefix, "prefix", shard.DefaultPrefix, "etcd key prefix")
	pf.DurationVar(&f.timeout, "timeout", 10*time.Minute, "bound on the whole operation, draining included")
	pf.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	f.access.addFlags(pf)
	cmd.AddCommand(
		f.maxEpochFlag(f.mapCmd("bump-epoch", "Raise the epoch by one without moving names (after restoring an etcd cluster from a snapshot)",
			`Raises the shard map's epoch by one and writes it to every cluster's meta/epoch,
in the order of a resharding (pending map, every cluster bumped, new map in force),
without moving any name. Every waiter enqueued afterwards gets a fencing token above
every token issued before, on any cluster. Run it after restoring a cluster from a
snapshot, before gateways serve it again: see docs/operations.md, "Backup and restore".`,
			func(ctx context.Context, rs *shard.Resharder) (shard.Map, error) {
				m, err := rs.BumpEpoch(ctx)
				return m, f.explain(err)
			})),
		f.mapCmd("show", "Print the shard map in force", "", func(ctx context.Context, rs *shard.Resharder) (shard.Map, error) {
			snap, err := rs.Store.Load(ctx)
			return snap.Map, err
		}),
		f.maxEpochFlag(&cobra.Command{
			Use:   "add NAME=URL[,URL…]",
			Short: "Add an etcd cluster and move its share of names to it",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := parseShardCluster(args[0])
				if err != nil {
					return usageError{err}
				}
				return f.change(cmd, func(cur []shard.Cluster) ([]shard.Cluster, error) {
					if slices.ContainsFunc(cur, func(x shard.Cluster) bool { return x.Name == c.Name }) {
						return nil, usageError{fmt.Errorf("cluster %q is already in the map", c.Name)}
					}
					return append(cur, c), nil
				}, map[string][]string{c.Name: c.Endpoints})
			},
		}),
		f.maxEpochFlag(&cobra.Command{
			Use:   "remove NAME",
			Short: "Remove an etcd cluster once its names have moved to the others",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return f.change(cmd, func(cur []shard.Cluster) ([]shard.Cluster, error) {
					out := slices.DeleteFunc(slices.Clone(cur), func(x shard.Cluster) bool { return x.Name == args[0] })
					if len(out) == len(cur) {
						return nil, usageError{fmt.Errorf("cluster %q is not in the map", args[0])}
					}
					if len(out) == 0 {
						return nil, usageError{errors.New("cannot remove the last cluster")}
					}
					return out, nil
				}, nil)
			},
		}),
		f.mapCmd("sweep", "Finish a change: wait until draining clusters have let go of moved names", "",
			func(ctx context.Context, rs *shard.Resharder) (shard.Map, error) {
				return rs.Sweep(ctx, 500*time.Millisecond)
			}),
	)
	return cmd
}

// mapCmd is the subcommand use, without arguments, that runs fn (run).
func (f *shardsFlags) mapCmd(use, short, long string, fn func(context.Context, *shard.Resharder) (shard.Map, error)) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, fn) }}
}

// run dials the home cluster, calls fn with a Resharder over it and prints
// the map fn returns.
func (f *shardsFlags) run(cmd *cobra.Command, fn func(context.Context, *shard.Resharder) (shard.Map, error)) error {
	if f.output != "table" && f.output != "json" {
		return usageError{fmt.Errorf("--output %q: want table or json", f.output)}
	}
	clusters, err := parseClusters(f.etcd)
	if err != nil {
		return usageError{err}
	}
	if len(clusters) == 0 {
		return usageError{errors.New("--etcd is required: the home cluster as name=url1,url2")}
	}
	if f.maxEpoch < shard.MinEpoch || f.maxEpoch > shard.MaxEpoch {
		return usageError{fmt.Errorf("--max-epoch %d: want %d to %d", f.maxEpoch, shard.MinEpoch, shard.MaxEpoch)}
	}
	dial, err := f.access.dialer(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	cli, err := f.access.connect(ctx, dial, clusters[0], f.prefix)
	if err != nil {
		return err
	}
	defer cli.Close()
	overrides := map[string][]string{}
	for _, c := range clusters {
		overrides[c.Name] = c.Endpoints
	}
	rs := &shard.Resharder{
		Store: shard.NewStore(cli, f.prefix), Prefix: f.prefix, Endpoints: overrides, EpochLimit: f.maxEpoch, Dial: dial,
		Names:    locks.Names{},
		Progress: func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) },
	}
	m, err := fn(ctx, rs)
	if err != nil {
		return err
	}
	return printMap(cmd.OutOrStdout(), f.output, m)
}

// change moves the map to next(current clusters), then sweeps.
func (f *shardsFlags) change(cmd *cobra.Command, next func([]shard.Cluster) ([]shard.Cluster, error), extra map[string][]string) error {
	return f.run(cmd, func(ctx context.Context, rs *shard.Resharder) (shard.Map, error) {
		snap, err := rs.Store.Load(ctx)
		if err != nil {
			return shard.Map{}, err
		}
		clusters, err := next(snap.Map.Clusters)
		if err != nil {
			return shard.Map{}, err
		}
		maps.Copy(rs.Endpoints, extra)
		if _, err := rs.Apply(ctx, clusters); err != nil {
			return shard.Map{}, f.explain(err)
		}
		m, err := rs.Sweep(ctx, 500*time.Millisecond)
		if err != nil {
			return m, fmt.Errorf("the new map is in force but draining is not finished (%w); run `leasegate shards sweep` to finish", err)
		}
		return m, nil
	})
}

// explain adds to a refusal at the epoch limit how to lift it.
func (f *shardsFlags) explain(err error) error {
	if !errors.Is(err, shard.ErrEpochLimit) || f.maxEpoch >= shard.MaxEpoch {
		return err
	}
	return fmt.Errorf("%w (--max-epoch raises the limit of this run; see docs/operations.md first)", err)
}

func parseShardCluster(v string) (shard.Cluster, error) {
	cs, err := parseClusters([]string{v})
	if err != nil {
		return shard.Cluster{}, err
	}
	if !strings.Contains(v, "=") {
		return shard.Cluster{}, fmt.Errorf("%q: want NAME=URL[,URL…]", v)
	}
	return shard.Cluster{Name: cs[0].Name, Endpoints: cs[0].Endpoints}, nil
}

func printMap(w io.Writer, format string, m shard.Map) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "epoch\t%d\n", m.Epoch)
	for _, c := range m.Clusters {
		fmt.Fprintf(tw, "cluster\t%s\t%s\n", c.Name, strings.Join(c.Endpoints, ","))
	}
	if m.Pending != nil {
		fmt.Fprintf(tw, "pending\tepoch %d\t%s\n", m.Pending.Epoch, strings.Join(m.Pending.ClusterNames(), ","))
	}
	if len(m.Draining) > 0 {
		fmt.Fprintf(tw, "draining\t%s\n", strings.Join(m.Draining, ","))
	}
	return tw.Flush()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/shard"
)

func newIDKeysCmd() *cobra.Command {
	var etcd []string
	var prefix string
	var keep int
	var access etcdAccess
	cmd := &cobra.Command{
		Use:   "id-keys",
		Short: "Show or rotate the keys that sign lock and session ids",
		Long: `Every lock id and session id a gateway issues carries an HMAC tag under a key
the whole fleet shares, so an id nobody issued, or one that was edited, is refused
before etcd is touched. Unless the gateways run with --id-keys-file, the keys live
in the home etcd cluster (the first --etcd) at <prefix>/meta/id-keys, created by
the first gateway to start; gateways follow changes to them at once.

rotate makes a new key the signing key and keeps the old ones for verifying ids
already issued; retire N drops key N once no id signed with it can still be in
use (the longest a lock or session may be held and renewed). Secrets are never
printed.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringArrayVar(&etcd, "etcd", nil, "the home etcd cluster as name=url1,url2 (required)")
	pf.StringVar(&prefix, "prefix", shard.DefaultPrefix, "etcd key prefix")
	access.addFlags(pf)
	run := func(cmd *cobra.Command, fn func(context.Context, *clientv3.Client) (*gateway.IDKeys, error)) error {
		clusters, err := parseClusters(etcd)
		if err != nil {
			return usageError{err}
		}
		if len(clusters) == 0 {
			return usageError{errors.New("--etcd is required: the home cluster as name=url1,url2")}
		}
		dial, err := access.dialer(cmd)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		defer cancel()
		cli, err := access.connect(ctx, dial, clusters[0], prefix)
		if err != nil {
			return err
		}
		defer cli.Close()
		k, err := fn(ctx, cli)
		if err != nil {
			return err
		}
		return printIDKeys(cmd.OutOrStdout(), k)
	}
	// update applies change to the stored keys (server.UpdateIDKeys).
	update := func(cmd *cobra.Command, change func(*gateway.IDKeys) (*gateway.IDKeys, error)) error {
		return run(cmd, func(ctx context.Context, cli *clientv3.Client) (*gateway.IDKeys, error) {
			return server.UpdateIDKeys(ctx, cli, prefix, change)
		})
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Sign new ids with a fresh key; keep the previous keys for verifying",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keep < 2 {
				return usageError{fmt.Errorf("--keep %d: want at least 2 (the new key and the one ids were signed with until now)", keep)}
			}
			return update(cmd, func(k *gateway.IDKeys) (*gateway.IDKeys, error) { return k.Rotated(keep) })
		},
	}
	rotate.Flags().IntVar(&keep, "keep", 3, "keys to keep in all, the new one included; the oldest beyond it are retired")
	cmd.AddCommand(
		&cobra.Command{
			Use:   "show",
			Short: "List the key numbers (the first signs); creates the keys if there are none",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return run(cmd, func(ctx context.Context, cli *clientv3.Client) (*gateway.IDKeys, error) {
					k, _, err := server.LoadIDKeys(ctx, cli, prefix)
					return k, err
				})
			},
		},
		rotate,
		&cobra.Command{
			Use:   "retire N",
			Short: "Stop accepting ids signed with key N (not the signing key)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				n, err := strconv.ParseUint(args[0], 10, 8)
				if err != nil || n == 0 {
					return usageError{fmt.Errorf("key number %q: want 1 to 255", args[0])}
				}
				return update(cmd, func(k *gateway.IDKeys) (*gateway.IDKeys, error) { return k.Without(uint8(n)) })
			},
		},
	)
	return cmd
}

func printIDKeys(w io.Writer, k *gateway.IDKeys) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tUSE")
	for i, key := range k.Keys() {
		use := "verify"
		if i == 0 {
			use = "sign, verify"
		}
		fmt.Fprintf(tw, "%d\t%s\n", key.ID, use)
	}
	return tw.Flush()
}

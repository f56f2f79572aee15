package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/client"
)

// Commands that look across the fleet (ls, queue, watch) and steer it
// (force-release, audit).

func newLsCmd(g *globals) *cobra.Command {
	var pf pageFlags
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List locks and elections (holder, token, waiters, shard) across every shard",
		Long: `ls lists the locks and elections whose names begin with PREFIX (all of them
without one), on every shard, elections first, each in key order: for each,
its kind (lock or election), its holder's client id (an election's leader),
fencing token, since when it waited or held, its lease expiry, the number of
waiters, the shard and that shard's breaker state on the gateway. It reads
--page-size per call and stops after --limit rows (0: all).

Text that clients sent (names, client ids) is printed as it is when it is
printable, and otherwise as a quoted string with escapes (such as "a\nb"),
so it cannot forge rows or reach the terminal as control sequences.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return walkPages(cmd.Context(), g, pf, func(ctx context.Context, c *client.Client, tok string) ([]client.LockSummary, string, error) {
				page, err := c.ListLocks(ctx, prefix, pf.size, tok)
				return page.Locks, page.NextPageToken, err
			}, lsFields)
		},
	}
	pf.register(cmd, "locks")
	return cmd
}

// pageFlags are the flags of a command that walks pages.
type pageFlags struct{ size, limit int }

func (pf *pageFlags) register(cmd *cobra.Command, what string) {
	cmd.Flags().IntVar(&pf.size, "page-size", 100, what+" per call (1 to 1000)")
	cmd.Flags().IntVar(&pf.limit, "limit", 0, "stop after this many "+what+" (0: all)")
}

// walkPages prints the items of every page that fetch returns, each call
// bounded by --timeout, until the last page or --limit items.
func walkPages[T any](ctx context.Context, g *globals, pf pageFlags, fetch func(context.Context, *client.Client, string) ([]T, string, error), fields func(T) []field) error {
	if pf.size < 1 || pf.size > 1000 {
		return usagef("--page-size %d: want 1 to 1000", pf.size)
	}
	if pf.limit < 0 {
		return usagef("--limit %d: want 0 (all) or more", pf.limit)
	}
	return g.withClient(func(c *client.Client) error {
		p := g.batchPrinter()
		defer p.flush()
		tok, n := "", 0
		for {
			cctx, cancel := context.WithTimeout(ctx, g.timeout)
			items, next, err := fetch(cctx, c, tok)
			cancel()
			if err != nil {
				return err
			}
			for _, it := range items {
				if pf.limit > 0 && n == pf.limit {
					return nil
				}
				n++
				if err := p.print(fields(it)...); err != nil {
					return err
				}
			}
			if err := p.flush(); err != nil {
				return err
			}
			if tok = next; tok == "" {
				return nil
			}
		}
	})
}

func lsFields(l client.LockSummary) []field {
	var h client.LockHolder
	if len(l.Holders) > 0 {
		h = l.Holders[0]
	}
	return []field{
		{"KIND", "kind", l.Kind},
		{"NAME", "name", l.Name},
		{"LIMIT", "limit", l.Limit},
		{"HELD", "held", len(l.Holders)},
		{"HOLDER", "holderClientId", h.ClientID},
		{"TOKEN", "fencingToken", h.Token},
		{"SINCE", "since", h.Since},
		{"EXPIRES", "expiresAt", h.Expires},
		{"WAITERS", "waiters", l.Waiters},
		{"SHARD", "shard", l.Shard},
		{"BREAKER", "shardBreaker", l.ShardBreaker},
	}
}

func newQueueCmd(g *globals) *cobra.Command {
	var election bool
	cmd := &cobra.Command{
		Use:   "queue NAME",
		Short: "Show a lock's (or an election's) holders and waiters in queue order",
		Long: `queue lists NAME's holders and waiters in FIFO order, one row each: position
(0 for a holder, 1 for the waiter granted next, as the waiter's own acquire
reports it), client id, since when it waited, whether it belongs to a session,
and each holder's fencing token and lease expiry. With --election it lists
election NAME's leader and the campaigners behind it. It never shows a lock
id, a request id or a secret.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				describe := c.DescribeQueue
				if election {
					describe = func(ctx context.Context, name string) (client.Queue, error) { return c.Election(name).Queue(ctx) }
				}
				q, err := describe(ctx, args[0])
				if err != nil {
					return err
				}
				p := g.batchPrinter()
				defer p.flush()
				held := int64(0)
				for _, e := range q.Entries {
					if e.Holder {
						held++
					}
					if err := p.print(
						field{"POS", "position", e.Position},
						field{"CLIENT", "clientId", e.ClientID},
						field{"HOLDER", "holder", e.Holder},
						field{"TOKEN", "fencingToken", e.Token},
						field{"WAITING SINCE", "waitingSince", e.WaitingSince},
						field{"EXPIRES", "expiresAt", e.Expires},
						field{"SESSION", "session", e.Session},
						field{"SHARD", "shard", q.Shard},
						field{"BREAKER", "shardBreaker", q.ShardBreaker},
					); err != nil {
						return err
					}
				}
				if len(q.Entries) == 0 && !p.json {
					fmt.Fprintf(g.stdout, "%s is free (shard %s)\n", termSafe(q.Name), termSafe(q.Shard))
				}
				if shown := int64(len(q.Entries)); shown > 0 && shown < q.Waiters+held {
					cmd.PrintErrf("leasectl: %d more waiters not shown (the answer is cut to fit one message)\n", q.Waiters+held-shown)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&election, "election", false, "NAME is an election's: list its leader and campaigners")
	return cmd
}

func newWatchCmd(g *globals) *cobra.Command {
	var resume string
	cmd := &cobra.Command{
		Use:   "watch PREFIX",
		Short: "Stream lock and election events (held, queued, released, expired, left) under a name prefix",
		Long: `watch prints the current holders and waiters of the locks and elections whose
names begin with PREFIX (from "snapshot"), then every change as it happens (from "live"):
held, queued, released, expired, force_released and left, with fencing tokens
and queue positions, until interrupted. It follows every shard through the
gateway's Watch stream; a stream that breaks is resumed where it stopped, on
the next gateway, without losing or repeating an event. When a shard's history
is gone the gateway resyncs it: a note goes to stderr and that shard's current
state is printed again (from "snapshot").

With -o json every line carries resumeToken: pass the last one to --resume to
continue a watch that was stopped.`,
		Args: exactArgs("PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := g.batchPrinter()
			return g.withClient(func(c *client.Client) error {
				err := c.Watch(cmd.Context(), args[0], resume, func(m client.WatchMessage) error {
					defer p.flush() // a message's events at once, aligned
					from := "live"
					switch m.Kind {
					case "snapshot":
						from = "snapshot"
					case "resync":
						cmd.PrintErrf("leasectl: shard %s: history compacted; its current state follows\n", termSafe(strings.Join(m.Shards, ", ")))
					}
					for _, e := range m.Events {
						if err := p.print(
							field{"TIME", "time", time.Now()},
							field{"FROM", "from", from},
							field{"EVENT", "event", e.Type},
							field{"KIND", "kind", e.Kind},
							field{"NAME", "name", e.Name},
							field{"CLIENT", "clientId", e.ClientID},
							field{"TOKEN", "fencingToken", e.Token},
							field{"POS", "position", e.Position},
							field{"SHARD", "shard", e.Shard},
							field{"REVISION", "revision", e.Revision},
							field{"RESUME", "resumeToken", m.ResumeToken},
						); err != nil {
							return err
						}
					}
					return nil
				})
				if cmd.Context().Err() != nil {
					return nil // interrupted
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&resume, "resume", "", "resume token of the last event seen (from -o json): continue after it")
	return cmd
}

func newForceReleaseCmd(g *globals) *cobra.Command {
	var reason string
	var token int64
	cmd := &cobra.Command{
		Use:   "force-release NAME --reason REASON",
		Short: "Evict a lock's holder (admin role), recording why",
		Long: `force-release evicts NAME's current holder: its key is deleted, the next waiter
is granted with a higher fencing token, and the evicted holder's renew and
release fail. The gateway records who, when, why, the evicted token and client
id (see "leasectl audit"), logs it and counts it. It needs the admin role (see
docs/security.md); without authentication, only the local operator has it
(a caller on this machine that names a loopback Host, not a web page).

Without --fencing-token, leasectl first reads the holder's token and evicts only that
holder: a holder that changes in between is not evicted, and the command fails
(exit status 1). A free name is reported as released=false.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return usagef("--reason is required: say why the holder is evicted")
			}
			return g.show(cmd.Context(), func(ctx context.Context, c *client.Client) ([]field, error) {
				tok := token
				if tok == 0 {
					d, err := c.Describe(ctx, args[0])
					if err != nil {
						return nil, err
					}
					if !d.Held {
						return evictionFields(args[0], client.Eviction{Shard: d.Shard}), nil
					}
					tok = d.Token
				}
				ev, err := c.ForceRelease(ctx, args[0], reason, tok)
				return evictionFields(args[0], ev), err
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the holder is evicted (required; recorded)")
	cmd.Flags().Int64Var(&token, "fencing-token", 0, "evict only the holder with this fencing token (default: the one holding when read)")
	return cmd
}

func evictionFields(name string, ev client.Eviction) []field {
	id := ""
	if ev.Audit != nil {
		id = ev.Audit.ID
	}
	return []field{
		{"NAME", "name", name},
		{"RELEASED", "released", ev.Released},
		{"EVICTED TOKEN", "evictedFencingToken", ev.EvictedToken},
		{"EVICTED CLIENT", "evictedClientId", ev.EvictedClientID},
		{"SHARD", "shard", ev.Shard},
		{"AUDIT ID", "auditId", id},
	}
}

func newAuditCmd(g *globals) *cobra.Command {
	var pf pageFlags
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List force-releases, newest first (admin role)",
		Long: `audit lists the tenant's audit records across every shard, newest first: when,
who, what, which lock, the evicted holder's token and client id, and why. It
stops after --limit records (0: all the gateway keeps).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return walkPages(cmd.Context(), g, pf, func(ctx context.Context, c *client.Client, tok string) ([]client.AuditRecord, string, error) {
				page, err := c.ListAudit(ctx, pf.size, tok)
				return page.Records, page.NextPageToken, err
			}, auditFields)
		},
	}
	pf.register(cmd, "records")
	return cmd
}

func auditFields(r client.AuditRecord) []field {
	return []field{
		{"AT", "at", r.At},
		{"ACTOR", "actor", r.Actor},
		{"ACTION", "action", r.Action},
		{"NAME", "name", r.Name},
		{"TOKEN", "evictedFencingToken", r.EvictedToken},
		{"CLIENT", "evictedClientId", r.EvictedClientID},
		{"SHARD", "shard", r.Shard},
		{"REASON", "reason", r.Reason},
	}
}

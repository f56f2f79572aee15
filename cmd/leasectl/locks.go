package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/client"
)

// acquireFlags are the flags acquire, try and run share.
type acquireFlags struct {
	ttl       time.Duration
	wait      time.Duration
	requestID string
	quiet     bool
	limit     int
	lockDelay time.Duration
	grace     time.Duration // run and elect (registerSupervised)
}

func (a *acquireFlags) register(cmd *cobra.Command, wait bool) {
	f := cmd.Flags()
	f.DurationVar(&a.ttl, "ttl", 30*time.Second, "lease TTL (whole seconds; etcd raises it to its minimum)")
	if wait {
		f.DurationVar(&a.wait, "wait", 0, "longest time to wait in the queue (0: until interrupted)")
		f.BoolVarP(&a.quiet, "quiet", "q", false, "do not report the queue position on stderr while waiting")
	}
	f.StringVar(&a.requestID, "request-id", "", "idempotency key: repeating a call with it resumes the same queue place or grant (default random)")
	f.DurationVar(&a.lockDelay, "lock-delay", 0, "should the lock's lease expire rather than be released, keep the name from everyone for this long after (at most 1m; fencing tokens are the real answer)")
	f.IntVar(&a.limit, "limit", 0, "semaphore limit: up to N holders at once, each with its own lock id and token (0: 1, a lock; at most 1000; every caller of NAME must give the same)")
}

// waitOptions are the options of a call that waits for name: options,
// and the queue position reported on g's stderr unless --quiet.
func (a *acquireFlags) waitOptions(g *globals, name string) ([]client.AcquireOption, error) {
	opts, err := a.options()
	if err != nil || a.quiet {
		return opts, err
	}
	return append(opts, progress(g.stderr, name, time.Now)), nil
}

func (a *acquireFlags) options() ([]client.AcquireOption, error) {
	if a.ttl < time.Second {
		return nil, usagef("--ttl %s: want at least 1s", a.ttl)
	}
	if a.wait < 0 {
		return nil, usagef("--wait %s: want 0 (until interrupted) or a positive duration", a.wait)
	}
	opts := []client.AcquireOption{client.WithTTL(a.ttl), client.WithWaitTimeout(a.wait)}
	if a.requestID != "" {
		opts = append(opts, client.WithRequestID(a.requestID))
	}
	if a.limit < 0 {
		return nil, usagef("--limit %d: want 0 (a lock) or a semaphore's limit up to 1000", a.limit)
	}
	if a.limit > 0 {
		opts = append(opts, client.WithLimit(a.limit))
	}
	if a.lockDelay < 0 {
		return nil, usagef("--lock-delay %s: want 0 or a positive duration up to 1m", a.lockDelay)
	}
	if a.lockDelay > 0 {
		opts = append(opts, client.WithLockDelay(a.lockDelay))
	}
	return opts, nil
}

func printLock(p *printer, l *client.Lock) error {
	return p.print(
		field{"NAME", "name", l.Name()},
		field{"TOKEN", "fencingToken", l.Token()},
		field{"TTL", "ttlMs", l.TTL()},
		field{"EXPIRES", "expiresAt", l.Expires()},
		field{"SHARD", "shard", l.Shard()},
		field{"LOCK ID", "lockId", l.ID()},
	)
}

func newAcquireCmd(g *globals) *cobra.Command {
	var a acquireFlags
	cmd := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Wait for a lock and print its id and fencing token",
		Long: `acquire waits in NAME's FIFO queue until it is granted the lock, --wait passes
(exit status 3) or it is interrupted, then prints the lock id and fencing token.
While it waits, it reports its place in the queue on stderr whenever that
changes (leasectl: waiting for "NAME": position 3, 4.2s — position 1 being
the next to be granted: for a lock, the number of holders and waiters
ahead; for a semaphore of limit N with k keys ahead, k - N + 1, as "leasectl
queue" numbers it too); --quiet silences it.

leasectl exits once the lock is granted, so nothing renews it: it lapses after
--ttl unless you renew it ("leasectl renew LOCKID TOKEN") or release it
("leasectl release LOCKID TOKEN"). To hold a lock while a command runs, use
"leasectl run".`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.waitOptions(g, args[0])
			if err != nil {
				return err
			}
			return g.withClient(func(c *client.Client) error {
				l, err := c.Acquire(cmd.Context(), args[0], opts...)
				if err != nil {
					return err
				}
				return printLock(g.printer(), l)
			})
		},
	}
	a.register(cmd, true)
	return cmd
}

func newTryCmd(g *globals) *cobra.Command {
	var a acquireFlags
	cmd := &cobra.Command{
		Use:   "try NAME",
		Short: "Take a lock only if it is free; never wait",
		Long: `try takes NAME's lock if nobody holds or waits for it and prints the lock id and
fencing token; otherwise it exits with status 3 and says until when the holder's
lease runs — or, for a free name an expired holder's lock-delay holds back, until
when the delay lasts. Like acquire, it does not renew the lock after it exits.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.options()
			if err != nil {
				return err
			}
			return g.call(cmd.Context(), func(ctx context.Context, c *client.Client) error {
				l, err := c.TryAcquire(ctx, args[0], opts...)
				var held *client.HeldError
				if errors.As(err, &held) && g.output == "json" {
					fields := []field{{"", "acquired", false}, {"", "holderExpiresAt", held.HolderExpires}}
					if !held.DelayUntil.IsZero() {
						fields = append(fields, field{"", "delayUntil", held.DelayUntil})
					}
					if perr := g.printer().print(fields...); perr != nil {
						return perr
					}
					return exitStatus{code: exitNotAcquired}
				}
				if err != nil {
					return err
				}
				return printLock(g.printer(), l)
			})
		},
	}
	a.register(cmd, false)
	return cmd
}

// newByIDCmd is the command "VERB LOCKID TOKEN": one unary call, do, on
// the lock with that id and fencing token, and the record it returns.
func newByIDCmd(g *globals, verb, short, long string, do func(ctx context.Context, c *client.Client, id string, token int64) ([]field, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " LOCKID TOKEN",
		Short: short,
		Long:  long,
		Args:  exactArgs("LOCKID", "TOKEN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			token, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || token <= 0 {
				return usagef("token %q: want a positive integer", args[1])
			}
			return g.show(cmd.Context(), func(ctx context.Context, c *client.Client) ([]field, error) { return do(ctx, c, args[0], token) })
		},
	}
}

func newRenewCmd(g *globals) *cobra.Command {
	return newByIDCmd(g, "renew", "Extend a held lock's lease once",
		`renew extends the lease of the lock with the given id and fencing token by its
TTL and prints the new expiry (on the gateway's clock). It exits with status 4
when the lock is no longer held: lost (expired or taken over) or released.`,
		func(ctx context.Context, c *client.Client, id string, token int64) ([]field, error) {
			r, err := c.RenewByID(ctx, id, token)
			return []field{{"RENEWED", "renewed", true}, {"TTL", "ttlMs", r.TTL}, {"EXPIRES", "expiresAt", r.Expires}}, err
		})
}

func newReleaseCmd(g *globals) *cobra.Command {
	return newByIDCmd(g, "release", "Release a held lock",
		`release frees the lock with the given id and fencing token. It is idempotent:
releasing a lock that is already gone prints released false and succeeds, and it
can never free a newer holder's lock.`,
		func(ctx context.Context, c *client.Client, id string, token int64) ([]field, error) {
			released, err := c.ReleaseByID(ctx, id, token)
			return []field{{"RELEASED", "released", released}}, err
		})
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasegate/leasegate/client"
)

func newRunCmd(g *globals) *cobra.Command {
	var a acquireFlags
	var name string
	cmd := &cobra.Command{
		Use:   "run --lock NAME [--ttl 30s] [--wait 1m] [--grace 10s] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock; stop it before the lock can lapse",
		Long: `run waits for NAME's lock, then runs CMD while it holds the lock, renewing the
lease in the background (every TTL/3). While it waits, it reports its place
in the queue on stderr whenever that changes, as acquire does (--quiet
silences it).

CMD's environment carries:
  LEASEGATE_FENCING_TOKEN  the grant's fencing token: send it with every write to
                           the protected resource, which must refuse older tokens
  LEASEGATE_LOCK_NAME      NAME
  LEASEGATE_LOCK_ID        the lock id

run stops CMD before the lease can lapse. The lock has a conservative deadline,
which each renewal moves forward. When it comes within --grace and no renewal
has confirmed the lock (gateways unreachable or cut off from etcd), run sends
SIGTERM to CMD, and SIGKILL at the deadline if CMD has not exited. When a
gateway reports the lock expired or taken over, another holder may already
run, so CMD gets SIGKILL at once. In both cases run exits with status 4 and a
message saying so. Otherwise it exits with CMD's status (128+N when CMD was
killed by signal N).

--grace defaults to min(10s, TTL/3) and may not exceed TTL/3: renewals come
every TTL/3, so a longer grace would stop CMD while the lock is healthy.

IMPORTANT: only fencing protects the resource from a CMD that ignores SIGTERM
and is paused (GC, SIGSTOP, a VM migration) past its SIGKILL, and from a
leasectl that is itself stopped (SIGSTOP, ^Z) or paused while CMD runs on:
nothing renews the lock then, and nothing stops CMD until leasectl runs
again. Send LEASEGATE_FENCING_TOKEN with every write.

CMD runs in a process group of its own, so that a signal reaches every process
it started; it is not meant to read from the terminal. Signals sent to
leasectl:
  SIGHUP, SIGINT,   stop: forwarded to CMD's process group, which gets --grace
  SIGQUIT, SIGTERM  to exit before SIGKILL; then the lock is released. The
                    terminal sends the first three to leasectl, not to CMD.
  SIGUSR1, SIGUSR2  forwarded to CMD's process group (dropped before CMD
                    starts).
Signals leasectl was started with ignored (nohup) stay ignored, in CMD too. A
stop signal N before CMD starts (while run waits for the lock, or after the
grant) keeps CMD from starting: run releases the lock if it was granted and
exits with status 128+N.

When CMD exits, whatever it left running in its process group is killed
(SIGKILL) before the lock is released. If leasectl dies without cleaning up
(SIGKILL, the OOM killer), CMD's whole process group is killed at once: CMD
runs under a small supervisor process (leasectl itself) that kills the group
when leasectl is gone; the lock then lapses at its TTL. Processes that leave
CMD's process group (setsid, setpgid) are out of reach. On systems other than
Unix there is no supervisor and no process group: signals reach CMD alone,
and CMD outlives a killed leasectl.

Unless leasectl is killed, the lock is released on every exit path. If no lock
is granted within --wait, run exits with status 3 without running CMD.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("no command to run; usage: leasectl run --lock NAME -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return usagef("--lock is required")
			}
			return a.supervise(g, cmd, name, fmt.Sprintf("lock %q", name), args, holdLock)
		},
	}
	a.registerSupervised(cmd)
	cmd.Flags().StringVar(&name, "lock", "", "name of the lock to hold (required)")
	// Everything after CMD belongs to CMD, even without "--".
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// registerSupervised registers the flags of run and elect: acquire's and
// --grace.
func (a *acquireFlags) registerSupervised(cmd *cobra.Command) {
	a.register(cmd, true)
	cmd.Flags().DurationVar(&a.grace, "grace", defaultGrace, "time CMD gets between SIGTERM and SIGKILL; at most TTL/3")
	cmd.Flags().Lookup("grace").DefValue = "min(10s, TTL/3)"
}

// supervise is run and elect: with the wait's options, the --grace to use
// and a client, it runs argv under the term acquire waits for on name
// (runHeld); what names the term in messages.
func (a *acquireFlags) supervise(g *globals, cmd *cobra.Command, name, what string, argv []string,
	acquire func(context.Context, *client.Client, string, []client.AcquireOption) (*holding, error)) error {
	opts, err := a.waitOptions(g, name)
	if err != nil {
		return err
	}
	grace, err := graceFor(a.ttl, a.grace, cmd.Flags().Changed("grace"))
	if err != nil {
		return err
	}
	return g.withClient(func(c *client.Client) error {
		return runHeld(cmd.Context(), g, what, func(ctx context.Context) (*holding, error) { return acquire(ctx, c, name, opts) }, grace, argv)
	})
}

// superviseArg, as leasectl's first argument, makes it CMD's supervisor
// (see child_unix.go) rather than the command-line client.
const superviseArg = "__supervise"

// childExit is how CMD ended: the status a shell would report, and err when
// leasectl has more to say than the status.
type childExit struct {
	status int
	err    error
}

// startIgnored records which of the stop and relay signals this process
// was started with ignored (nohup, a background job of a script), read
// before anything subscribes to them.
var startIgnored = func() map[os.Signal]bool {
	m := map[os.Signal]bool{}
	for _, s := range append(slices.Clone(stopSignals), relaySignals...) {
		m[s] = signal.Ignored(s)
	}
	return m
}()

// unlessIgnored is sigs less those the process was started with ignored.
// leasectl leaves those ignored, so that CMD inherits that as it would
// without leasectl.
func unlessIgnored(sigs ...os.Signal) []os.Signal {
	return slices.DeleteFunc(slices.Clone(sigs), func(s os.Signal) bool { return startIgnored[s] })
}

// handledSignals are the signals leasectl and CMD's supervisor catch.
func handledSignals() []os.Signal {
	return unlessIgnored(append(slices.Clone(stopSignals), relaySignals...)...)
}

// isStop reports whether sig tells leasectl to stop, rather than being only
// forwarded to CMD.
func isStop(sig syscall.Signal) bool { return slices.Contains(stopSignals, os.Signal(sig)) }

// holdLock waits for the lock name and returns it as what CMD runs under.
func holdLock(ctx context.Context, c *client.Client, name string, opts []client.AcquireOption) (*holding, error) {
	l, err := c.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return newHolding(l, l.Release, "LEASEGATE_LOCK_NAME="+name, "LEASEGATE_LOCK_ID="+l.ID()), nil
}

// term is what CMD runs under: a Lock (run) or a Leadership (elect).
type term interface {
	Token() int64
	Expires() time.Time
	Done() <-chan struct{}
	Err() error
}

// holding is a granted term with what ends it and what CMD's environment
// gets from it.
type holding struct {
	term
	release func(context.Context) error
	env     []string
}

// newHolding is t with release; CMD's environment gets t's fencing token
// and env.
func newHolding(t term, release func(context.Context) error, env ...string) *holding {
	return &holding{term: t, release: release, env: append([]string{"LEASEGATE_FENCING_TOKEN=" + strconv.FormatInt(t.Token(), 10)}, env...)}
}

// runHeld waits for a term with acquire, then runs argv while it holds;
// what names the term in messages ("lock \"x\"").
func runHeld(ctx context.Context, g *globals, what string, acquire func(context.Context) (*holding, error), grace time.Duration, argv []string) error {
	// Subscribe before the wait so that no signal is missed up to CMD's end.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, handledSignals()...)
	defer signal.Stop(sigs)

	return runGranted(ctx, g, what, acquireUnlessStopped(ctx, acquire, sigs), grace, argv, sigs)
}

// waited is how the wait for a term ended (acquireUnlessStopped): the term
// (nil unless granted), the stop signal that arrived meanwhile (0 if none)
// and the wait's error.
type waited struct {
	lock *holding
	stop syscall.Signal
	err  error
}

// runGranted runs argv while w's term holds, unless the wait ended without
// one or a stop signal arrived on sigs before argv could start; it releases
// the term, if any, once argv and its group have ended.
func runGranted(ctx context.Context, g *globals, what string, w waited, grace time.Duration, argv []string, sigs <-chan os.Signal) error {
	lock, stop, err := w.lock, w.stop, w.err
	if lock != nil {
		defer func() {
			// The release must happen even when a signal cancelled ctx.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
			defer cancel()
			if err := lock.release(rctx); err != nil {
				fmt.Fprintf(os.Stderr, "leasectl: release %s: %v (it lapses at its TTL)\n", what, firstLine(g.creds.explain(err).Error()))
			}
		}()
		// The last moment to honour a stop signal by not starting CMD at
		// all; one that arrives later is forwarded to CMD.
		if stop == 0 {
			stop = pendingStop(sigs)
		}
	}
	switch {
	case stop != 0 && lock != nil:
		return exitStatus{code: 128 + int(stop), err: fmt.Errorf("signal %d (%v) arrived after %s was granted; %s not started", int(stop), stop, what, argv[0])}
	case stop != 0:
		return exitStatus{code: 128 + int(stop), err: fmt.Errorf("signal %d (%v) arrived while waiting for %s; %s not started", int(stop), stop, what, argv[0])}
	case err != nil && ctx.Err() != nil:
		return exitStatus{code: exitError, err: fmt.Errorf("interrupted while waiting for %s", what)}
	case err != nil:
		return err
	}
	if err := lock.Err(); err != nil {
		return exitStatus{code: exitLost, err: fmt.Errorf("%s was lost before %s started: %v", what, argv[0], firstLine(err.Error()))}
	}

	ch, err := startChild(argv, append(os.Environ(), lock.env...))
	if err != nil {
		return err
	}
	// Every path from here waits for CMD's end (and its group's) before
	// the deferred release runs.
	return watchChild(ch, lock, what, grace, sigs, argv[0])
}

// acquireUnlessStopped waits for a term until it is granted, the wait
// fails, or a stop signal arrives on sigs. The grant can race a stop
// signal, so both can be set: the caller must release the term.
func acquireUnlessStopped(ctx context.Context, acquire func(context.Context) (*holding, error), sigs <-chan os.Signal) waited {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan waited, 1)
	go func() {
		l, err := acquire(actx)
		got <- waited{lock: l, err: err}
	}()
	var stop syscall.Signal
	for {
		select {
		case s := <-sigs:
			// Signals that are only forwarded have no CMD to go to yet.
			if sig := s.(syscall.Signal); stop == 0 && isStop(sig) {
				stop = sig
				cancel()
			}
		case w := <-got:
			w.stop = stop
			return w
		}
	}
}

// pendingStop drains the signals already received and returns the first
// stop signal among them, or 0 if there was none.
func pendingStop(sigs <-chan os.Signal) syscall.Signal {
	var stop syscall.Signal
	for {
		select {
		case s := <-sigs:
			if sig := s.(syscall.Signal); stop == 0 && isStop(sig) {
				stop = sig
			}
		default:
			return stop
		}
	}
}

// statusOf is the exit status a shell would report for a finished command.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return exitError
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

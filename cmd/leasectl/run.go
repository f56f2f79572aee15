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
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "run --lock NAME [--ttl 30s] [--wait 1m] [--grace 10s] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock; stop it if the lock is lost",
		Long: `run waits for NAME's lock, then runs CMD while it holds the lock, renewing the
lease in the background (every TTL/3).

CMD's environment carries:
  LEASEGATE_FENCING_TOKEN  the grant's fencing token: send it with every write to
                           the protected resource, which must refuse older tokens
  LEASEGATE_LOCK_NAME      NAME
  LEASEGATE_LOCK_ID        the lock id

If the lock is lost — a gateway reports it expired or taken over, or no gateway
can confirm it before its conservative deadline — run sends SIGTERM to CMD,
SIGKILL after --grace if it has not exited, and exits with status 4 and a
message saying the lock was lost. Otherwise it exits with CMD's status (128+N
when CMD was killed by signal N).

CMD runs in a process group of its own, so that a signal reaches every process
it started; it is not meant to read from the terminal. Signals sent to leasectl:
  SIGHUP, SIGINT, SIGQUIT, SIGTERM  stop: forwarded to CMD's process group,
                     which gets --grace to exit before SIGKILL; then the lock
                     is released. Closing the terminal (SIGHUP) is one.
  SIGUSR1, SIGUSR2   forwarded to CMD's process group.
Signals leasectl was started with ignored (nohup) stay ignored, in CMD too.
A stop signal N before CMD starts — while run waits for the lock, or after the
grant — keeps CMD from starting: run releases the lock if it was granted and
exits with status 128+N.

When CMD exits, whatever it left running in its process group is killed
(SIGKILL) before the lock is released. If leasectl dies without cleaning up
(SIGKILL, the OOM killer), CMD's whole process group is killed at once: CMD runs
under a small supervisor process (leasectl itself) that kills the group when
leasectl is gone. Processes that leave CMD's process group (setsid, setpgid)
are out of reach. On systems other than Unix there is no supervisor and no
process group: signals reach CMD alone, and CMD outlives a killed leasectl.

The lock is released on every exit path. If no lock is granted within --wait,
run exits with status 3 without running CMD.`,
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
			if grace < 0 {
				return usagef("--grace %s: want 0 or a positive duration", grace)
			}
			opts, err := a.options()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			return runLocked(cmd.Context(), g, c, name, opts, grace, args)
		},
	}
	a.register(cmd, true)
	cmd.Flags().StringVar(&name, "lock", "", "name of the lock to hold (required)")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "time CMD gets to exit after SIGTERM on lock loss before SIGKILL")
	// Everything after CMD belongs to CMD, even without "--".
	cmd.Flags().SetInterspersed(false)
	return cmd
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

// testHookGranted, when set (by tests only), runs after the lock is granted
// and before leasectl decides whether to start CMD, with the channel on
// which leasectl receives signals.
var testHookGranted func(sigs <-chan os.Signal)

// runLocked holds the lock while argv runs.
func runLocked(ctx context.Context, g *globals, c *client.Client, name string, opts []client.AcquireOption, grace time.Duration, argv []string) error {
	// Subscribe before the wait so that no signal is missed up to CMD's end.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, handledSignals()...)
	defer signal.Stop(sigs)

	lock, stop, err := acquireUnlessStopped(ctx, c, name, opts, sigs)
	if lock != nil {
		defer func() {
			rctx, cancel := g.releaseCtx(ctx)
			defer cancel()
			if err := lock.Release(rctx); err != nil {
				fmt.Fprintf(os.Stderr, "leasectl: release lock %q: %v (it lapses at its TTL)\n", name, firstLine(err.Error()))
			}
		}()
		if testHookGranted != nil {
			testHookGranted(sigs)
		}
		// The last moment to honour a stop signal by not starting CMD at
		// all; one that arrives later is forwarded to CMD.
		if stop == 0 {
			stop = pendingStop(sigs)
		}
	}
	switch {
	case stop != 0 && lock != nil:
		return exitStatus{code: 128 + int(stop), err: fmt.Errorf("signal %d (%v) arrived after lock %q was granted; %s not started, lock released", int(stop), stop, name, argv[0])}
	case stop != 0:
		return exitStatus{code: 128 + int(stop), err: fmt.Errorf("signal %d (%v) arrived while waiting for lock %q; %s not started", int(stop), stop, name, argv[0])}
	case err != nil && ctx.Err() != nil:
		return exitStatus{code: exitError, err: fmt.Errorf("interrupted while waiting for lock %q", name)}
	case err != nil:
		return err
	}

	ch, err := startChild(argv, append(os.Environ(),
		"LEASEGATE_FENCING_TOKEN="+strconv.FormatInt(lock.Token(), 10),
		"LEASEGATE_LOCK_NAME="+name,
		"LEASEGATE_LOCK_ID="+lock.ID(),
	))
	if err != nil {
		return err
	}
	// Every path from here waits for CMD's end (and its group's) before
	// the deferred release runs.
	return watchChild(ch, lock, grace, sigs, argv[0])
}

// watchChild waits until CMD has ended, stopping it when the lock is lost or
// leasectl is told to stop, and returns leasectl's exit status.
func watchChild(ch *child, lock *client.Lock, grace time.Duration, sigs <-chan os.Signal, cmdName string) error {
	var kill *time.Timer
	var killC <-chan time.Time
	killIn := func(d time.Duration) {
		if kill == nil {
			kill = time.NewTimer(d)
			killC = kill.C
		}
	}
	defer func() {
		if kill != nil {
			kill.Stop()
		}
	}()
	lost := lock.Done()
	var lostErr error
	for {
		select {
		case res := <-ch.exited():
			switch {
			case lostErr != nil:
				return exitStatus{code: exitLost, err: fmt.Errorf("lock %q was lost while %s ran, so it was stopped: %v", lock.Name(), cmdName, firstLine(lostErr.Error()))}
			case res.err != nil:
				return exitStatus{code: res.status, err: res.err}
			}
			return exitStatus{code: res.status}
		case s := <-sigs:
			sig := s.(syscall.Signal)
			ch.signal(sig)
			if isStop(sig) {
				killIn(grace)
			}
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			fmt.Fprintf(os.Stderr, "leasectl: lock %q lost: %v; sending SIGTERM to %s (SIGKILL in %s)\n", lock.Name(), firstLine(lostErr.Error()), cmdName, grace)
			ch.signal(syscall.SIGTERM)
			killIn(grace)
		case <-killC:
			killC = nil
			ch.signal(syscall.SIGKILL)
		}
	}
}

// acquireUnlessStopped waits for the lock until it is granted, the wait
// fails, or a stop signal arrives on sigs; it returns the lock (nil unless
// granted) and the stop signal (0 if none). The grant can race a stop
// signal, so both can be set: the caller must release the lock.
func acquireUnlessStopped(ctx context.Context, c *client.Client, name string, opts []client.AcquireOption, sigs <-chan os.Signal) (*client.Lock, syscall.Signal, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lock *client.Lock
		err  error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(actx, name, opts...)
		got <- result{l, err}
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
		case r := <-got:
			return r.lock, stop, r.err
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

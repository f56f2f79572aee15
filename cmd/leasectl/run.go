package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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
when CMD was killed by signal N). SIGINT and SIGTERM sent to leasectl are
forwarded to CMD. CMD runs in its own process group so that these signals reach
every process it started; it is not meant to read from the terminal.

SIGINT or SIGTERM (signal N) before CMD starts — while run waits for the lock,
or after the grant — keeps CMD from starting: run releases the lock if it was
granted and exits with status 128+N.

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

// testHookGranted, when set (by tests only), runs after the lock is granted
// and before leasectl decides whether to start CMD, with the channel on
// which leasectl receives signals.
var testHookGranted func(sigs <-chan os.Signal)

// runLocked holds the lock while argv runs.
func runLocked(ctx context.Context, g *globals, c *client.Client, name string, opts []client.AcquireOption, grace time.Duration, argv []string) error {
	// Subscribe before the wait so that no signal is missed up to CMD's end.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
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

	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(),
		"LEASEGATE_FENCING_TOKEN="+strconv.FormatInt(lock.Token(), 10),
		"LEASEGATE_LOCK_NAME="+name,
		"LEASEGATE_LOCK_ID="+lock.ID(),
	)
	setProcessGroup(child)
	if err := child.Start(); err != nil {
		return exitStatus{code: 127, err: fmt.Errorf("start %s: %w", argv[0], err)}
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	lost := lock.Done()
	var kill <-chan time.Time
	var lostErr error
	for {
		select {
		case err := <-exited:
			if lostErr != nil {
				return exitStatus{code: exitLost, err: fmt.Errorf("lock %q was lost while %s ran, so it was stopped: %v", name, argv[0], firstLine(lostErr.Error()))}
			}
			return exitStatus{code: statusOf(err)}
		case s := <-sigs:
			_ = signalGroup(child.Process, s.(syscall.Signal))
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			fmt.Fprintf(os.Stderr, "leasectl: lock %q lost: %v; sending SIGTERM to %s (SIGKILL in %s)\n", name, firstLine(lostErr.Error()), argv[0], grace)
			_ = signalGroup(child.Process, syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = signalGroup(child.Process, syscall.SIGKILL)
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
			if stop == 0 {
				stop = s.(syscall.Signal)
				cancel()
			}
		case r := <-got:
			return r.lock, stop, r.err
		}
	}
}

// pendingStop drains the signals already received and returns the first,
// or 0 if there was none.
func pendingStop(sigs <-chan os.Signal) syscall.Signal {
	var stop syscall.Signal
	for {
		select {
		case s := <-sigs:
			if stop == 0 {
				stop = s.(syscall.Signal)
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

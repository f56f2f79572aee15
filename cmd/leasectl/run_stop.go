package main

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// defaultGrace is --grace when it is not given, unless TTL/3 is shorter.
const defaultGrace = 10 * time.Second

// graceFor is the --grace to use with --ttl ttl: grace itself if it was
// given explicitly (set), else min(defaultGrace, ttl/3).
//
// CMD gets SIGTERM once the lock's deadline is within grace, so grace must
// fit in what is left of the lease when healthy renewals happen: one is sent
// every TTL/3 (±10%) and the deadline is TTL − margin after its send, so
// just before its answer the deadline is still about 0.6 TTL − margin away.
// A grace above TTL/3 would stop CMD while the lock is healthy; it is
// refused.
func graceFor(ttl, grace time.Duration, set bool) (time.Duration, error) {
	bound := ttl / 3
	switch {
	case !set:
		return min(defaultGrace, bound), nil
	case grace < 0:
		return 0, usagef("--grace %s: want 0 or a positive duration, at most TTL/3 (%s for --ttl %s)", grace, bound, ttl)
	case grace > bound:
		return 0, usagef("--grace %s: want at most TTL/3 (%s for --ttl %s): renewals come every TTL/3, so a longer grace would stop CMD while the lock is healthy", grace, bound, ttl)
	}
	return grace, nil
}

// watchChild waits until CMD has ended (its process group too), stopping it
// when the lock is at risk or lost or leasectl is told to stop, and returns
// leasectl's exit status. CMD is stopped:
//
//  1. when the lock's conservative deadline (Lock.Expires, re-read because
//     each renewal moves it) is within grace: SIGTERM, then SIGKILL at the
//     deadline unless a renewal has moved it by then, so that CMD is gone
//     before the lease can lapse;
//  2. when the lock is lost (Done): SIGKILL at once, because a gateway's
//     proof of loss means another holder may already run, and a loss by
//     deadline means the deadline has come;
//  3. on a stop signal: it is forwarded, and SIGKILL follows grace later.
func watchChild(ch *child, lock term, what string, grace time.Duration, sigs <-chan os.Signal, cmdName string) error {
	warn := time.NewTimer(time.Until(lock.Expires()) - grace)
	defer warn.Stop()
	kill := time.NewTimer(time.Hour)
	kill.Stop()
	defer kill.Stop()
	var (
		atRisk  bool      // SIGTERM sent because of the deadline
		stopBy  time.Time // when SIGKILL is due after a stop signal; zero if none
		killed  bool      // SIGKILL sent
		lostErr error
	)
	// killAt is when SIGKILL is due: the first of the lock's current
	// deadline once at risk and grace after a stop signal.
	killAt := func() time.Time {
		at := stopBy
		if d := lock.Expires(); atRisk && (at.IsZero() || d.Before(at)) {
			at = d
		}
		return at
	}
	sigkill := func() {
		if !killed {
			killed = true
			ch.signal(syscall.SIGKILL)
			warn.Stop()
			kill.Stop()
		}
	}
	lost := lock.Done()
	for {
		select {
		case res := <-ch.done:
			switch {
			case lostErr != nil:
				return exitStatus{code: exitLost, err: fmt.Errorf("%s was lost while %s ran, so %s was stopped: %v", what, cmdName, cmdName, firstLine(lostErr.Error()))}
			case atRisk:
				return exitStatus{code: exitLost, err: fmt.Errorf("%s was about to be lost while %s ran — no gateway confirmed it within --grace %s of its expiry — so %s was stopped", what, cmdName, grace, cmdName)}
			case res.err != nil:
				return exitStatus{code: res.status, err: res.err}
			}
			return exitStatus{code: res.status}
		case s := <-sigs:
			if killed {
				continue
			}
			sig := s.(syscall.Signal)
			ch.signal(sig)
			if isStop(sig) && stopBy.IsZero() {
				stopBy = time.Now().Add(grace)
				kill.Reset(time.Until(killAt()))
			}
		case <-warn.C:
			deadline := lock.Expires()
			if left := time.Until(deadline); left > grace {
				warn.Reset(left - grace) // a renewal moved the deadline
				continue
			}
			atRisk = true
			fmt.Fprintf(os.Stderr, "leasectl: %s is about to be lost: no gateway has confirmed it, and it expires at %s (in %s); stopping %s: SIGTERM now, SIGKILL at the expiry\n",
				what, deadline.Format(time.RFC3339Nano), time.Until(deadline).Round(time.Millisecond), cmdName)
			ch.signal(syscall.SIGTERM)
			kill.Reset(time.Until(killAt()))
		case <-kill.C:
			if left := time.Until(killAt()); left > 0 {
				kill.Reset(left) // a renewal moved the deadline
				continue
			}
			sigkill()
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			if !killed {
				fmt.Fprintf(os.Stderr, "leasectl: %s is lost: %v; another holder may have it now: killing %s (SIGKILL)\n", what, firstLine(lostErr.Error()), cmdName)
			}
			sigkill()
		}
	}
}

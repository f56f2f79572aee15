//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stop signal that arrives after the grant but before CMD starts keeps
// CMD from starting: the lock is released and leasectl exits 128+N. The
// lock is granted for real; the signal is on leasectl's channel when the
// grant is handed on, as one that lands in that window is.
func TestRunStopSignalBeforeStart(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ctx := ctxT(t)
	ran := filepath.Join(t.TempDir(), "ran")
	gl := &globals{endpoints: []string{g.URL}, timeout: 10 * time.Second}
	c, err := gl.client()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := holdLock(ctx, c, "early", nil)
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	var stderr bytes.Buffer
	err = runGranted(ctx, gl, `lock "early"`, waited{lock: lock}, time.Second, []string{"sh", "-c", `touch "$1"`, "sh", ran}, sigs)
	code := exitCode(err, &stderr)
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("leasectl run exited %d, stderr %q; want %d", code, stderr.String(), 128+int(syscall.SIGTERM))
	}
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("CMD ran although SIGTERM arrived before it started")
	}
	if !strings.Contains(stderr.String(), "not started") {
		t.Errorf("stderr %q does not say CMD was not started", stderr.String())
	}
	assertReleased(t, g, "early")
}

// awaitCond polls cond until it holds, failing the test after within.
func awaitCond(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A stop signal during the wait ends it; CMD never runs and leasectl exits
// 128+N.
func TestRunStopSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	held := decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "try", "queued", "--ttl", "10s"))
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "queued", "--", "sh", "-c", "echo ran")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "leasectl run to queue", func() bool {
		return decode(t, runOK(t, "--endpoint", g.URL, "-o", "json", "describe", "queued"))["waiters"] == float64(1)
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) || stdout.Len() != 0 {
		t.Errorf("leasectl run interrupted while waiting exited %d, stdout %q, stderr %q; want %d and CMD not run",
			code, stdout.String(), stderr.String(), 128+int(syscall.SIGINT))
	}
	runOK(t, "--endpoint", g.URL, "release", held["lockId"].(string), fmt.Sprint(int64(held["fencingToken"].(float64))))
}

// familyScript starts a grandchild that ignores every stop signal, so that
// only SIGKILL of CMD's process group ends it, waits on the FIFO $2 until
// the grandchild's traps are in place, prints "pids CMD GRANDCHILD" and
// runs $1 ("wait" or "exit N").
const familyScript = `sh -c 'trap "" HUP INT QUIT TERM; echo > "$0"; exec sleep 60' "$2" &
read _ < "$2"
echo "pids $$ $!"
eval "$1"`

// runningFamily is a leasectl run of familyScript whose pids have been read.
type runningFamily struct {
	cmd          *exec.Cmd
	out          <-chan string
	stderr       *os.File
	pid, grandID int // CMD's pid (its process group's id) and its child's
}

// startFamily starts leasectl run of familyScript on lock, with --ttl 30s so
// that a lock left behind would stay held for the whole test; with
// ownGroup, in a process group of its own.
func startFamily(t *testing.T, g *gateway, lock, then string, ownGroup bool) *runningFamily {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", lock, "--ttl", "30s", "--", "sh", "-c", familyScript, "sh", then, fifo)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A file, not a buffer: Wait must not wait for a leftover process that
	// still holds stderr.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	cmd.Stderr = stderr
	if ownGroup {
		// As a shell starts a job: leasectl leads a process group, which
		// its own children (the supervisor) join.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &runningFamily{cmd: cmd, out: lines(stdout), stderr: stderr}
	if _, err := fmt.Sscanf(nextLine(t, f.out, "CMD's pids"), "pids %d %d", &f.pid, &f.grandID); err != nil {
		t.Fatalf("CMD's first line: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(-f.pid, syscall.SIGKILL)
			_ = syscall.Kill(f.grandID, syscall.SIGKILL)
		}
	})
	return f
}

func (f *runningFamily) stderrText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(f.stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// awaitFamilyGone waits until CMD, its child and every other member of its
// process group are gone.
func (f *runningFamily) awaitFamilyGone(t *testing.T, within time.Duration) {
	t.Helper()
	awaitCond(t, within, fmt.Sprintf("CMD %d, its child %d and process group %d to be gone", f.pid, f.grandID, f.pid), func() bool {
		return processGone(f.pid) && processGone(f.grandID) && len(groupMembers(t, f.pid)) == 0
	})
}

// groupMembers lists the live processes in process group pgid.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	var out []int
	for _, p := range liveProcesses(t) {
		if p.pgrp == pgid {
			out = append(out, p.pid)
		}
	}
	return out
}

// procInfo is a process as /proc/PID/stat describes it.
type procInfo struct{ pid, ppid, pgrp int }

// liveProcesses lists the processes that are not zombies.
func liveProcesses(t *testing.T) []procInfo {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// state ppid pgrp … follow the parenthesised command name.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		pgrp, _ := strconv.Atoi(fields[2])
		out = append(out, procInfo{pid, ppid, pgrp})
	}
	return out
}

// assertReleased checks that another client gets lock at once: leasectl
// released it rather than leaving it to lapse at its TTL.
func assertReleased(t *testing.T, g *gateway, lock string) {
	t.Helper()
	if r := run(t, nil, "--endpoint", g.URL, "-o", "json", "try", lock); r.code != 0 {
		t.Errorf("lock %q not free after leasectl run exited: try exited %d: %s%s", lock, r.code, r.stdout, r.stderr)
	}
}

// Each stop signal sent to leasectl is forwarded to CMD's process group;
// once CMD has exited, what it left running in its group is killed, then
// the lock is released, and leasectl exits with CMD's status. The same
// cleanup follows a CMD that exits on its own.
func TestRunStopSignalsEndCommandGroup(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for _, tc := range []struct {
		name  string
		sig   syscall.Signal // 0: none, CMD exits by itself
		group bool           // send sig to leasectl's process group, as a terminal does
		then  string         // what CMD does after starting its child
		want  int
	}{
		{"SIGHUP", syscall.SIGHUP, false, "wait", 128 + int(syscall.SIGHUP)},
		{"SIGINT", syscall.SIGINT, false, "wait", 128 + int(syscall.SIGINT)},
		{"SIGQUIT", syscall.SIGQUIT, false, "wait", 128 + int(syscall.SIGQUIT)},
		{"SIGTERM", syscall.SIGTERM, false, "wait", 128 + int(syscall.SIGTERM)},
		// The terminal signals the whole foreground group, the supervisor
		// included, which must survive to clean up.
		{"hangup", syscall.SIGHUP, true, "wait", 128 + int(syscall.SIGHUP)},
		{"interrupt", syscall.SIGINT, true, "wait", 128 + int(syscall.SIGINT)},
		{"exit", 0, false, "exit 3", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sig != 0 && signal.Ignored(tc.sig) {
				t.Skipf("%s is ignored in this process, so leasectl inherits that and leaves it ignored", tc.name)
			}
			lock := "family-" + tc.name
			f := startFamily(t, g, lock, tc.then, tc.group)
			switch {
			case tc.group:
				if err := syscall.Kill(-f.cmd.Process.Pid, tc.sig); err != nil {
					t.Fatal(err)
				}
			case tc.sig != 0:
				if err := f.cmd.Process.Signal(tc.sig); err != nil {
					t.Fatal(err)
				}
			}
			_ = f.cmd.Wait()
			if code := f.cmd.ProcessState.ExitCode(); code != tc.want {
				t.Errorf("leasectl exited %d (%v); want CMD's status %d. stderr:\n%s", code, f.cmd.ProcessState, tc.want, f.stderrText(t))
			}
			// The SIGKILL is sent before the release; dying takes the
			// kernel a moment.
			f.awaitFamilyGone(t, 2*time.Second)
			assertReleased(t, g, lock)
		})
	}
}

// A leasectl that is killed outright (SIGKILL, the OOM killer) takes CMD and
// every process in CMD's process group with it.
func TestRunKilledTakesCommandGroup(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := startFamily(t, g, "killed", "wait", false)
	if err := f.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = f.cmd.Wait()
	f.awaitFamilyGone(t, 5*time.Second)
}

// SIGUSR1 and SIGUSR2 are forwarded to CMD and do not stop it.
func TestRunRelaysUserSignals(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "usr", "--", "sh", "-c",
		`trap 'echo usr1' USR1; trap 'echo usr2' USR2; trap 'exit 0' TERM; echo ready; while :; do sleep 0.01; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	if l := nextLine(t, out, "ready"); l != "ready" {
		t.Fatalf("CMD printed %q; want ready", l)
	}
	for _, tc := range []struct {
		sig  syscall.Signal
		want string
	}{{syscall.SIGUSR1, "usr1"}, {syscall.SIGUSR2, "usr2"}} {
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		if l := nextLine(t, out, tc.want); l != tc.want {
			t.Fatalf("CMD printed %q; want %s", l, tc.want)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("leasectl exited with %v; want CMD's status 0", err)
	}
}

// If the supervisor itself is killed, CMD dies with it (Pdeathsig) and
// leasectl kills the rest of CMD's process group before it releases the
// lock, then exits 1 saying so.
func TestRunSupervisorKilled(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	f := startFamily(t, g, "orphaned", "wait", false)
	sup := childrenOf(t, f.cmd.Process.Pid)
	if len(sup) != 1 {
		t.Fatalf("leasectl has children %v; want one, the supervisor", sup)
	}
	if err := syscall.Kill(sup[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = f.cmd.Wait()
	stderr := f.stderrText(t)
	if code := f.cmd.ProcessState.ExitCode(); code != exitError || !strings.Contains(stderr, "process group was killed") {
		t.Errorf("leasectl exited %d, stderr %q; want %d and a message that CMD's process group was killed", code, stderr, exitError)
	}
	f.awaitFamilyGone(t, 2*time.Second)
	assertReleased(t, g, "orphaned")
}

// childrenOf lists the live children of pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	for _, p := range liveProcesses(t) {
		if p.ppid == pid {
			out = append(out, p.pid)
		}
	}
	return out
}

// A CMD that ignores the stop signal forwarded to it is killed --grace
// later, so that a leasectl told to stop does stop.
func TestRunStopSignalEscalatesAfterGrace(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	const grace = 300 * time.Millisecond
	cmd := command(t, nil, "--endpoint", g.URL, "run", "--lock", "stubborn", "--grace", grace.String(), "--",
		"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.01; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if l := nextLine(t, lines(stdout), "ready"); l != "ready" {
		t.Fatalf("CMD printed %q; want ready", l)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("leasectl still runs 5s after SIGTERM with --grace %s", grace)
	}
	elapsed := time.Since(sent)
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGKILL) {
		t.Errorf("leasectl exited %d; want %d (CMD killed)", code, 128+int(syscall.SIGKILL))
	}
	if elapsed < grace {
		t.Errorf("CMD was killed %s after SIGTERM; want no sooner than --grace %s", elapsed, grace)
	}
	assertReleased(t, g, "stubborn")
}

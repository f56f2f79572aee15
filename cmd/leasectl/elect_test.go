package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// elect runs CMD with the term's token and the election's name and id in
// its environment, publishes --value while it leads, and resigns when CMD
// exits; leader and observe show it.
func TestElectRunsCommandWhileLeader(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	if r := run(t, nil, "--endpoint", g.URL, "leader", "svc"); r.code != exitNotAcquired {
		t.Fatalf("leader with nobody leading exited %d (%s); want %d", r.code, r.stderr, exitNotAcquired)
	}
	obs := command(t, nil, "--endpoint", g.URL, "observe", "--json", "svc")
	stdout, err := obs.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = obs.Process.Kill(); _ = obs.Wait() })
	events := lines(stdout)
	if e := decode(t, nextLine(t, events, "the first observation")); e["leading"] != false {
		t.Fatalf("first observation = %v; want nobody leading", e)
	}

	dir := t.TempDir()
	script := `echo "$LEASEGATE_FENCING_TOKEN $LEASEGATE_ELECTION_NAME ${#LEASEGATE_LEADER_ID}" > "$1"; leasectl_out=$("$2" --endpoint "$3" -o json leader svc); echo "$leasectl_out" > "$1.leader"`
	r := run(t, nil, "--endpoint", g.URL, "--client-id", "me", "elect", "svc", "--value", "host-a:80", "--ttl", "5s", "--",
		"sh", "-c", script, "sh", filepath.Join(dir, "env"), leasectl, g.URL)
	if r.code != 0 {
		t.Fatalf("elect exited %d: %s", r.code, r.stderr)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(env))
	token, err := strconv.ParseInt(f[0], 10, 64)
	if len(f) != 3 || err != nil || token <= 0 || f[1] != "svc" || f[2] == "0" {
		t.Fatalf("CMD's environment: %q; want a token, svc and a leader id", env)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "env.leader"))
	if err != nil {
		t.Fatal(err)
	}
	l := decode(t, strings.TrimSpace(string(raw)))
	if l["value"] != "host-a:80" || l["clientId"] != "me" || l["fencingToken"] != float64(token) {
		t.Fatalf("leader while CMD ran = %v; want host-a:80, me, token %d", l, token)
	}
	if e := decode(t, nextLine(t, events, "the leader observed")); e["leading"] != true || e["value"] != "host-a:80" || e["fencingToken"] != float64(token) {
		t.Fatalf("observation = %v; want host-a:80 at token %d", e, token)
	}
	if e := decode(t, nextLine(t, events, "the resignation observed")); e["leading"] != false {
		t.Fatalf("observation after CMD exited = %v; want nobody leading (elect resigned)", e)
	}
}

// A term lost (its lease revoked through etcd, as if it had expired) kills
// CMD at once; elect exits with status 4 saying leadership was lost.
func TestElectKillsCommandOnLostTerm(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	cmd := command(t, nil, "--endpoint", g.URL, "elect", "doomed", "--ttl", "3s", "--grace", "1s",
		"--", "sh", "-c", `trap "" TERM; sleep 60 & echo "ready $!"; wait`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := strings.Fields(nextLine(t, lines(stdout), "CMD ready"))
	sleepPID, err := strconv.Atoi(ready[len(ready)-1])
	if err != nil {
		t.Fatalf("CMD printed %q", ready)
	}
	if n := revokeLockLeases(t, g); n != 1 {
		t.Fatalf("revoked %d leases; want 1", n)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != exitLost {
		t.Fatalf("elect exited %d (%v); want %d. stderr:\n%s", code, err, exitLost, stderr.String())
	}
	if !strings.Contains(stderr.String(), `leadership of "doomed" was lost`) {
		t.Fatalf("stderr does not say leadership was lost:\n%s", stderr.String())
	}
	if !processGone(sleepPID) {
		t.Fatalf("CMD's child %d still runs after elect exited", sleepPID)
	}
}

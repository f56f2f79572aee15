package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// TestAcquireReportsQueuePosition queues a quiet acquire and a reporting
// one behind a holder: the reporting one prints its position as it
// changes, the quiet one nothing.
func TestAcquireReportsQueuePosition(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ep := []string{"--endpoint", g.URL, "-o", "json"}
	held := decode(t, runOK(t, append(ep, "try", "queue", "--ttl", "10s")...))

	quiet := command(t, nil, append(ep, "acquire", "queue", "--ttl", "10s", "--quiet")...)
	var quietOut, quietErr bytes.Buffer
	quiet.Stdout, quiet.Stderr = &quietOut, &quietErr
	if err := quiet.Start(); err != nil {
		t.Fatal(err)
	}
	quietDone := make(chan error, 1)
	go func() { quietDone <- quiet.Wait() }()
	awaitCond(t, 20*time.Second, "the quiet acquire to queue", func() bool {
		d, err := g.Client.Describe(ctxT(t), connect.NewRequest(&v1.DescribeRequest{Name: "queue"}))
		return err == nil && d.Msg.Waiters == 1
	})

	loud := command(t, nil, append(ep, "acquire", "queue", "--ttl", "10s")...)
	stderr, err := loud.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var loudOut bytes.Buffer
	loud.Stdout = &loudOut
	if err := loud.Start(); err != nil {
		t.Fatal(err)
	}
	reports := lines(stderr)
	wantProgress(t, nextLine(t, reports, "the first position report"), "queue", 2)

	runOK(t, append(ep, "release", held["lockId"].(string), fmtToken(held["fencingToken"]))...)
	if err := <-quietDone; err != nil {
		t.Fatalf("quiet acquire: %v: %s", err, quietErr.String())
	}
	if quietErr.Len() != 0 {
		t.Errorf("acquire --quiet wrote %q to stderr; want nothing", quietErr.String())
	}
	wantProgress(t, nextLine(t, reports, "the position after the holder left"), "queue", 1)
	q := decode(t, quietOut.String())
	runOK(t, append(ep, "release", q["lockId"].(string), fmtToken(q["fencingToken"]))...)
	var rest []string
	for l := range reports { // ends when the acquire exits; Wait closes the pipe after
		rest = append(rest, l)
	}
	if err := loud.Wait(); err != nil {
		t.Fatalf("reporting acquire: %v", err)
	}
	if len(rest) != 0 {
		t.Errorf("more reports after position 1: %q; want one per change", rest)
	}
	decode(t, loudOut.String())
}

var progressLine = regexp.MustCompile(`^leasectl: waiting for "([^"]+)": position (\d+), (\d+\.\d)s$`)

// wantProgress checks a report's form and position.
func wantProgress(t *testing.T, line, name string, want int) {
	t.Helper()
	m := progressLine.FindStringSubmatch(line)
	if m == nil || m[1] != name || m[2] != strconv.Itoa(want) {
		t.Fatalf("report %q; want `leasectl: waiting for %q: position N, S.Ss` with N = %d", line, name, want)
	}
}

func TestFmtWaited(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{0, "0.0s"}, {4200 * time.Millisecond, "4.2s"}, {59900 * time.Millisecond, "59.9s"}, {123500 * time.Millisecond, "2m3.5s"}} {
		if got := fmtWaited(tc.d); got != tc.want {
			t.Errorf("fmtWaited(%v) = %q; want %q", tc.d, got, tc.want)
		}
	}
}

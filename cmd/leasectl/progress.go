package main

import (
	"fmt"
	"io"
	"time"

	"github.com/leasegate/leasegate/client"
)

// progress reports a wait in the queue on w, one line whenever the
// position changes (the SDK reports changes only, not the gateway's
// heartbeats): `leasectl: waiting for "NAME": position 3, 4.2s`, the
// position being the gateway's (1: next to be granted) and the time
// counted from the start of the wait. The lines go to stderr whether or
// not it is a terminal — in a log they say why a job started late — and
// --quiet turns them off.
func progress(w io.Writer, name string, now func() time.Time) client.AcquireOption {
	start := now()
	return client.WithOnQueued(func(position int64) {
		waited := now().Sub(start).Round(100 * time.Millisecond)
		fmt.Fprintf(w, "leasectl: waiting for %q: position %d, %s\n", name, position, fmtWaited(waited))
	})
}

// fmtWaited prints a duration as seconds with one decimal ("4.2s"), or
// minutes and seconds past a minute ("2m3.5s").
func fmtWaited(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.String()
}

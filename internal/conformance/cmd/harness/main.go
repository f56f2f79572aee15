// Command harness runs the SDK conformance harness for a runner in another
// language: it starts one embedded etcd and the conformance gateways on
// loopback addresses, prints one line of JSON describing them (the
// conformance.Description a runner reads from LEASEGATE_CONFORMANCE), and
// serves until its standard input closes or it receives SIGTERM or SIGINT.
//
//	go run ./internal/conformance/cmd/harness
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/leasegate/leasegate/internal/conformance"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "leasegate-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h, err := conformance.Start(ctx, conformance.Config{Dir: dir})
	if err != nil {
		return err
	}
	defer h.Stop()
	line, err := json.Marshal(h.Description())
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	stdin := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdin)
	}()
	select {
	case <-ctx.Done():
	case <-stdin:
	}
	return nil
}

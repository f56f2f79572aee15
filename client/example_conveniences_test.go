package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/leasegate/leasegate/client"
)

// Run a job under a lock: fn's context ends the moment the lock is lost,
// and the lock is released when fn returns.
func ExampleClient_Do() {
	url, stop := exampleGateway()
	defer stop()
	c, _ := client.New([]string{url})
	defer c.Close()

	err := c.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		// Do the work with ctx; stop when it ends.
		fmt.Println("generating the report; lock held:", ctx.Err() == nil)
		return nil
	}, client.WithTTL(10*time.Second))
	fmt.Println("done:", err)
	// Output:
	// generating the report; lock held: true
	// done: <nil>
}

// A lock where code expects a sync.Locker. Lock panics if it cannot
// acquire; Held gives the *Lock for its token and loss signal.
func ExampleNewLocker() {
	url, stop := exampleGateway()
	defer stop()
	c, _ := client.New([]string{url})
	defer c.Close()

	var mu sync.Locker = client.NewLocker(c, "config-writer", client.WithTTL(10*time.Second))
	mu.Lock()
	fmt.Println("token is positive:", mu.(*client.Locker).Held().Token() > 0)
	mu.Unlock()
	// Output: token is positive: true
}

// Renew by hand: the lock lives until its deadline unless the work renews
// it, here between the steps of a batch.
func ExampleWithManualRenew() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url})
	defer c.Close()

	lock, err := c.Acquire(ctx, "batch:9", client.WithTTL(10*time.Second), client.WithManualRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	for step := 1; step <= 2; step++ {
		// … one step of the batch, checking lock.Context() …
		before := lock.Expires()
		deadline, err := lock.Renew(ctx)
		if errors.Is(err, client.ErrLockLost) {
			log.Fatal("lost the lock; stop the batch")
		}
		fmt.Println("step", step, "renewed; the deadline moved on:", err == nil && !deadline.Before(before))
	}
	// Output:
	// step 1 renewed; the deadline moved on: true
	// step 2 renewed; the deadline moved on: true
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leasegate/leasegate/client"
)

// exampleGateway returns the gateway TestMain started for the examples; in
// your code, pass the URLs of your gateways to client.New instead.
func exampleGateway() (url string, stop func()) {
	return exampleURL, func() {}
}

// Hold a lock for a job, stop the work if the lock is lost, and send the
// fencing token with every write.
func Example() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()

	c, err := client.New([]string{url}, client.WithClientID("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	lock, err := c.Acquire(ctx, "process_order:42", client.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// Derive the job's context from the lock's: it is cancelled the moment
	// the lock is lost, and never later than its conservative deadline.
	work := lock.Context()
	fmt.Println("holding", lock.Name(), "- token is positive:", lock.Token() > 0, "- work may go on:", work.Err() == nil)

	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(lock.Err())
	// Output:
	// holding process_order:42 - token is positive: true - work may go on: true
	// lock released
}

func ExampleClient_TryAcquire() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url})
	defer c.Close()

	lock, _ := c.TryAcquire(ctx, "nightly-report")
	_, err := c.TryAcquire(ctx, "nightly-report")
	var held *client.HeldError
	fmt.Println(errors.Is(err, client.ErrNotAcquired), errors.As(err, &held) && !held.HolderExpires.IsZero())
	_ = lock.Release(ctx)
	// Output: true true
}

func ExampleWithOnQueued() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url})
	defer c.Close()

	holder, _ := c.Acquire(ctx, "batch:7")
	lock, err := c.Acquire(ctx, "batch:7", client.WithOnQueued(func(position int64) {
		fmt.Println("queued at position", position)
		go holder.Release(ctx) // the holder finishes while we wait
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted; the token grew:", lock.Token() > holder.Token())
	_ = lock.Release(ctx)
	// Output:
	// queued at position 1
	// granted; the token grew: true
}

func ExampleWithWaitTimeout() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url})
	defer c.Close()

	holder, _ := c.Acquire(ctx, "report")
	_, err := c.Acquire(ctx, "report", client.WithWaitTimeout(200*time.Millisecond))
	fmt.Println(errors.Is(err, client.ErrWaitTimeout))
	_ = holder.Release(ctx)
	// Output: true
}

// Many locks on one session lease: the SDK keeps the session alive, and
// losing it cancels every lock's context at once.
func ExampleSession() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url})
	defer c.Close()

	s, err := c.OpenSession(ctx, client.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"shard-0", "shard-1", "shard-2"} {
		l, err := s.Acquire(ctx, "partition/"+name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(l.Name(), "shares the session's deadline:", l.Expires().Equal(s.Expires()))
	}
	_ = s.Close(ctx) // releases every lock of the session
	fmt.Println(s.Err())
	// Output:
	// partition/shard-0 shares the session's deadline: true
	// partition/shard-1 shares the session's deadline: true
	// partition/shard-2 shares the session's deadline: true
	// leasegate: session: closed
}

// Lead an election, publish where the leader serves, and follow the
// leader from elsewhere.
func ExampleElection() {
	url, stop := exampleGateway()
	defer stop()
	ctx := context.Background()
	c, _ := client.New([]string{url}, client.WithClientID("scheduler-a"))
	defer c.Close()
	el := c.Election("scheduler")

	// Observers see the state now, then every change.
	octx, endObserve := context.WithCancel(ctx)
	changes := make(chan string, 8)
	go func() {
		for leader, err := range el.Observe(octx) {
			switch {
			case err != nil:
				changes <- "error: " + err.Error()
			case leader == nil:
				changes <- "nobody leads"
			default:
				changes <- fmt.Sprintf("%s leads at %s", leader.ClientID, leader.Value)
			}
		}
	}()
	fmt.Println(<-changes)

	lead, err := el.Campaign(ctx, []byte("10.0.0.7:8080"), client.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-changes)
	// Run the leader's work under lead.Context(): it ends the moment
	// leadership is lost. Fence its writes with lead.Token().
	if err := lead.Proclaim(ctx, []byte("10.0.0.7:9090")); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-changes)
	info, _ := el.Leader(ctx)
	fmt.Println("Leader:", string(info.Value), "- same term:", info.Token == lead.Token())

	_ = lead.Resign(ctx)
	fmt.Println(<-changes)
	endObserve()
	_, err = el.Leader(ctx)
	fmt.Println(errors.Is(err, client.ErrNoLeader))
	// Output:
	// nobody leads
	// scheduler-a leads at 10.0.0.7:8080
	// scheduler-a leads at 10.0.0.7:9090
	// Leader: 10.0.0.7:9090 - same term: true
	// nobody leads
	// true
}

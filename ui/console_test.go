package ui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	"github.com/leasegate/leasegate/internal/etcdtest"
	"github.com/leasegate/leasegate/internal/gwtest"
	"github.com/leasegate/leasegate/internal/server"
	"github.com/leasegate/leasegate/internal/telemetry"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
	"github.com/leasegate/leasegate/proto/leasegate/v1/leasegatev1connect"
	"github.com/leasegate/leasegate/shard"
)

// startGateway starts a gateway with metrics over two shards, c0 (the
// shared etcd member) and c1 (one of the test's own).
func startGateway(t *testing.T, opts ...gwtest.Option) *gwtest.Gateway {
	t.Helper()
	return startOn(t, etcdtest.Start(t), opts...)
}

// startOn is startGateway with c1 given.
func startOn(t *testing.T, c1 *etcdtest.Cluster, opts ...gwtest.Option) *gwtest.Gateway {
	t.Helper()
	p, err := telemetry.New(context.Background(), telemetry.Config{Version: "v0.0.0-test", Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	opts = append([]gwtest.Option{
		gwtest.Clusters(
			server.Cluster{Name: "c0", Endpoints: []string{shared.Endpoint()}},
			server.Cluster{Name: "c1", Endpoints: []string{c1.Endpoint()}}),
		gwtest.Configure(func(c *server.Config) { c.Telemetry = p }),
	}, opts...)
	return gwtest.Start(t, nil, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// hold takes name at once for clientID, through the API.
func hold(t *testing.T, c leasegatev1connect.LockServiceClient, name, clientID string) *v1.Granted {
	t.Helper()
	resp, err := c.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: name, TtlMs: 60_000, ClientId: clientID}))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.Acquired {
		t.Fatalf("TryAcquire(%q) found it held", name)
	}
	return resp.Msg.Granted
}

func release(t *testing.T, c leasegatev1connect.LockServiceClient, gr *v1.Granted) {
	t.Helper()
	if _, err := c.Release(ctxT(t), connect.NewRequest(&v1.ReleaseRequest{LockId: gr.LockId, FencingToken: gr.FencingToken})); err != nil {
		t.Fatal(err)
	}
}

// waiter is a streaming Acquire queued behind the holder.
type waiter struct {
	granted chan *v1.Granted
	cancel  context.CancelFunc
}

// enqueue starts an Acquire of name for clientID and returns once the
// gateway says it is queued.
func enqueue(t *testing.T, c leasegatev1connect.LockServiceClient, name, clientID string) *waiter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := c.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: name, TtlMs: 60_000, ClientId: clientID, WaitTimeoutMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() {
		t.Fatalf("Acquire(%q) for %s: %v", name, clientID, st.Err())
	}
	if st.Msg().GetQueued() == nil {
		t.Fatalf("Acquire(%q) for %s = %v; want queued", name, clientID, st.Msg())
	}
	w := &waiter{granted: make(chan *v1.Granted, 1), cancel: cancel}
	go func() {
		defer st.Close()
		for st.Receive() {
			if gr := st.Msg().GetGranted(); gr != nil {
				w.granted <- gr
				return
			}
		}
		if err := st.Err(); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
			t.Errorf("Acquire(%q) for %s: %v", name, clientID, err)
		}
		close(w.granted)
	}()
	return w
}

func (w *waiter) await(t *testing.T) *v1.Granted {
	t.Helper()
	select {
	case gr, ok := <-w.granted:
		if !ok {
			t.Fatal("the waiter's stream ended without a grant")
		}
		return gr
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted within 30 s")
	}
	return nil
}

// awaitText waits until the element sel shows want (trimmed). The pages
// redraw as data arrives, so a check reads the live DOM in the page
// rather than a node fetched earlier.
func awaitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	expr := fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() === %q`, sel, want)
	rctx, cancel := context.WithTimeout(ctx, live())
	defer cancel()
	if _, err := chromedp.Run(rctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(live()))); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q)?.textContent.trim() ?? '(no such element)'`, sel)))
		t.Fatalf("%s shows %q; want %q (%v)", sel, got, want, err)
	}
}

func TestBrowserOverviewShowsShards(t *testing.T) {
	g := startGateway(t)
	// A handoff, so the latency chart has something to draw.
	gr := hold(t, g.Client, "report", "nightly")
	w := enqueue(t, g.Client, "report", "retry")
	release(t, g.Client, gr)
	release(t, g.Client, w.await(t))
	// Three holders and a waiter, somewhere on the two shards.
	for _, name := range []string{"orders:1", "orders:2", "invoices:7"} {
		hold(t, g.Client, name, "worker-"+name)
	}
	enqueue(t, g.Client, "orders:1", "worker-b")

	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the console", chromedp.Navigate(g.URL+"/ui/"))
	await(t, ctx, live(), `#shards tr[data-shard="c0"]`)
	await(t, ctx, live(), `#shards tr[data-shard="c1"]`)
	for _, sh := range []string{"c0", "c1"} {
		awaitText(t, ctx, fmt.Sprintf(`#shards tr[data-shard=%q] td:nth-child(2)`, sh), "ok")
		awaitText(t, ctx, fmt.Sprintf(`#shards tr[data-shard=%q] td:nth-child(3)`, sh), "closed")
	}
	awaitJS(t, ctx, live(), "the shards' counts add up to 3 held and 1 waiting", `(() => {
		const sum = (col) => [...document.querySelectorAll('#shards td[data-col="' + col + '"]')].reduce((a, td) => a + Number(td.textContent), 0);
		return sum('held') === 3 && sum('waiting') === 1;
	})()`)
	await(t, ctx, live(), `#handoff svg rect.bar`)
	awaitJS(t, ctx, live(), "the chart counts 1 handoff", `document.querySelector('#handoff figcaption').textContent.startsWith('1 handoff since start')`)
	// A second poll gives the rates and the chart over time.
	awaitJS(t, ctx, live()+5*time.Second, "a rate is shown", `!document.querySelector('#shards tr[data-shard="c0"] td:nth-child(6)').textContent.includes('–')`)
	// A handoff while the page is open is drawn over time.
	gr = hold(t, g.Client, "report", "nightly")
	w = enqueue(t, g.Client, "report", "retry")
	release(t, g.Client, gr)
	release(t, g.Client, w.await(t))
	await(t, ctx, live()+5*time.Second, `#handoff svg circle.dot`)
	awaitJS(t, ctx, live(), "the chart counts 2 handoffs", `document.querySelector('#handoff figcaption').textContent.startsWith('2 handoffs since start')`)
	screenshot(t, ctx, "console-overview.png")
}

// A shard whose etcd stops shows as unavailable, its breaker opens, and
// the other shard's row is unaffected.
func TestBrowserOverviewShowsDeadShard(t *testing.T) {
	c1 := etcdtest.Start(t)
	bc := shard.DefaultBreakerConfig()
	bc.ConsecutiveFailures = 2
	bc.OpenTimeout = time.Minute
	g := startOn(t, c1, gwtest.Configure(func(c *server.Config) { c.Fleet.Breaker = bc }))
	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the console", chromedp.Navigate(g.URL+"/ui/"))
	awaitText(t, ctx, `#shards tr[data-shard="c1"] td:nth-child(2)`, "ok")
	c1.Stop()
	awaitText(t, ctx, `#shards tr[data-shard="c1"] td:nth-child(2)`, "unavailable")
	awaitText(t, ctx, `#shards tr[data-shard="c1"] td:nth-child(3)`, "open")
	awaitText(t, ctx, `#shards tr[data-shard="c1"] td[data-col="held"]`, "–")
	awaitText(t, ctx, `#shards tr[data-shard="c0"] td:nth-child(2)`, "ok")
	awaitText(t, ctx, `#shards tr[data-shard="c0"] td:nth-child(3)`, "closed")
	screenshot(t, ctx, "console-overview-dead-shard.png")
}

// With authentication on, the page asks for the token once, keeps it for
// the tab and sends it with every call.
func TestBrowserAsksForToken(t *testing.T) {
	g := startGateway(t, gwtest.Tokens(token+" acme ops"))
	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the console", chromedp.Navigate(g.URL+"/ui/"))
	await(t, ctx, live(), `#token-form`)
	awaitJS(t, ctx, live(), "the notice asks for a bearer token", `document.querySelector('#notice').textContent.includes('bearer token')`)
	run(t, ctx, 10*time.Second, "entering the token",
		chromedp.SendKeys(chromedp.CSS(`#token-input`), token),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	await(t, ctx, live(), `#shards tr[data-shard="c1"]`)
	awaitText(t, ctx, `#who`, "acme / ops (token)")
	// A tenant's caller is shown its own tenant's locks, and no rates or
	// latency: they cover every tenant.
	awaitJS(t, ctx, live(), "the overview says it counts acme's locks", `document.querySelector('#scope')?.textContent.includes('the locks of tenant acme')`)
	awaitJS(t, ctx, live(), "the overview says the metrics are the operator's", `document.body.textContent.includes('only its operator sees them')`)
	// A reload keeps the token: sessionStorage lives as long as the tab.
	run(t, ctx, 30*time.Second, "reloading", chromedp.Reload())
	await(t, ctx, live(), `#shards tr[data-shard="c0"]`)
}

// A lock taken through the API appears in the table as soon as Watch
// reports it; the prefix filters and the pages follow next_page_token.
func TestBrowserLockTable(t *testing.T) {
	g := startGateway(t)
	hold(t, g.Client, "other:1", "someone")
	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the lock table", chromedp.Navigate(g.URL+"/ui/#/locks?prefix=batch:&size=2"))
	awaitJS(t, ctx, live(), "the table follows Watch", `document.querySelector('#locks-status').textContent.startsWith('Live')`)

	start := time.Now()
	hold(t, g.Client, "batch:17", "worker-17")
	await(t, ctx, live(), `#locks tr[data-lock="batch:17"]`)
	t.Logf("batch:17 appeared in the table %s after its TryAcquire", time.Since(start))
	awaitText(t, ctx, `#locks tr[data-lock="batch:17"] td[data-col="holder"]`, "worker-17")
	if n := value(t, ctx, 5*time.Second, "counting rows", chromedp.Evaluate[int](`document.querySelectorAll('#locks tr[data-lock="other:1"]').length`)); n != 0 {
		t.Errorf("other:1 is listed under the prefix batch:")
	}

	// A waiter shows in the holder's row.
	enqueue(t, g.Client, "batch:17", "worker-18")
	awaitJS(t, ctx, live(), "batch:17 shows 1 waiter", `document.querySelector('#locks tr[data-lock="batch:17"] td[data-col="waiters"]')?.textContent === '1'`)

	// Three locks at two a page: two pages.
	hold(t, g.Client, "batch:18", "worker-18")
	hold(t, g.Client, "batch:19", "worker-19")
	awaitJS(t, ctx, live(), "the first page is full and has a next page",
		`document.querySelectorAll('#locks tr[data-lock]').length === 2 && !document.querySelector('.pager button:last-child').disabled`)
	screenshot(t, ctx, "console-locks.png")
	run(t, ctx, 10*time.Second, "next page", chromedp.Click(chromedp.CSS(`.pager button:last-child`)))
	await(t, ctx, live(), `#locks tr[data-lock="batch:19"]`)
	if n := value(t, ctx, 5*time.Second, "counting rows", chromedp.Evaluate[int](`document.querySelectorAll('#locks tr[data-lock]').length`)); n != 1 {
		t.Errorf("page 2 has %d rows; want 1", n)
	}
	run(t, ctx, 10*time.Second, "previous page", chromedp.Click(chromedp.CSS(`.pager button:first-child`)))
	await(t, ctx, live(), `#locks tr[data-lock="batch:17"]`)
}

// The lock page follows the queue: waiters join at their positions, and a
// release moves everyone up and shows the new holder with its lease.
func TestBrowserLockPageQueue(t *testing.T) {
	g := startGateway(t)
	alice := hold(t, g.Client, "deploy:prod", "alice")
	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the lock page", chromedp.Navigate(g.URL+"/ui/#/lock/"+url.PathEscape("deploy:prod")))
	await(t, ctx, live(), `#holder tr[data-holder="alice"]`)
	await(t, ctx, live(), `#no-waiters`)
	awaitText(t, ctx, `#holder td[data-col="token"]`, fmt.Sprint(alice.FencingToken))
	// The lease counts down.
	first := value(t, ctx, 5*time.Second, "reading the countdown", chromedp.Evaluate[string](`document.querySelector('#holder td[data-expires]').textContent`))
	awaitJS(t, ctx, live(), "the countdown moves", fmt.Sprintf(`document.querySelector('#holder td[data-expires]').textContent !== %q`, first))

	bob := enqueue(t, g.Client, "deploy:prod", "bob")
	await(t, ctx, live(), `#queue tr[data-position="1"][data-client="bob"]`)
	enqueue(t, g.Client, "deploy:prod", "carol")
	await(t, ctx, live(), `#queue tr[data-position="2"][data-client="carol"]`)

	release(t, g.Client, alice)
	await(t, ctx, live(), `#holder tr[data-holder="bob"]`)
	await(t, ctx, live(), `#queue tr[data-position="1"][data-client="carol"]`)
	gr := bob.await(t)
	awaitJS(t, ctx, live(), "bob's token and lease are shown", fmt.Sprintf(
		`document.querySelector('#holder td[data-col="token"]')?.textContent === '%d' && /s$/.test(document.querySelector('#holder td[data-expires]').textContent)`, gr.FencingToken))
	screenshot(t, ctx, "console-lock.png")
}

// An admin evicts a stuck holder with a reason: the next waiter is granted
// and the page shows the audit record.
func TestBrowserForceRelease(t *testing.T) {
	g := startGateway(t) // no authentication, on loopback: the caller is an admin
	stuck := hold(t, g.Client, "migrate:db", "stuck-job")
	next := enqueue(t, g.Client, "migrate:db", "next-job")
	ctx := newBrowser(t)
	run(t, ctx, 30*time.Second, "opening the lock page", chromedp.Navigate(g.URL+"/ui/#/lock/"+url.PathEscape("migrate:db")))
	await(t, ctx, live(), `#holder tr[data-holder="stuck-job"]`)
	await(t, ctx, live(), `#force-release`)
	const reason = "job hung on a dead NFS mount"
	run(t, ctx, 10*time.Second, "asking for a force release",
		chromedp.Click(chromedp.CSS(`#force-release`)),
		chromedp.SendKeys(chromedp.CSS(`#force-form textarea`), reason),
		chromedp.Click(chromedp.CSS(`#force-form button[type=submit]`)))
	await(t, ctx, live(), `#audit tr[data-audit]`)
	awaitText(t, ctx, `#audit tr[data-audit] td.reason`, reason)
	awaitText(t, ctx, `#audit tr[data-audit] td:nth-child(5)`, "stuck-job")
	gr := next.await(t)
	if gr.FencingToken <= stuck.FencingToken {
		t.Errorf("next holder's token %d is not above the evicted %d", gr.FencingToken, stuck.FencingToken)
	}
	await(t, ctx, live(), `#holder tr[data-holder="next-job"]`)
	awaitJS(t, ctx, live(), "the new holder's lease is shown", `/s$/.test(document.querySelector('#holder td[data-expires]').textContent)`)
	screenshot(t, ctx, "console-force-release.png")
}

// Only admins get the force release; the others see the queue alone.
func TestBrowserForceReleaseNeedsAdmin(t *testing.T) {
	const dev = "console-test-dev-token-0123456789"
	g := startGateway(t, gwtest.Tokens(token+" acme ops admin", dev+" acme dev"))
	hold(t, g.ConnectClient(gwtest.Bearer(dev)), "nightly", "cron")
	for _, tc := range []struct {
		token string
		admin bool
	}{{dev, false}, {token, true}} {
		ctx := newBrowser(t)
		run(t, ctx, 30*time.Second, "opening the lock page",
			chromedp.Navigate(g.URL+"/ui/"),
			chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`sessionStorage.setItem('leasegate.token', %q)`, tc.token)),
			chromedp.Navigate(g.URL+"/ui/#/lock/nightly"))
		await(t, ctx, live(), `#holder tr[data-holder="cron"]`)
		awaitJS(t, ctx, live(), "the admin probe answered", `document.querySelector('#admin').dataset.admin !== undefined`)
		n := value(t, ctx, 5*time.Second, "looking for the button", chromedp.Evaluate[int](`document.querySelectorAll('#force-release').length`))
		if (n == 1) != tc.admin {
			t.Errorf("admin %v: %d force-release buttons", tc.admin, n)
		}
	}
}

// A semaphore's next waiter is at position 1 on the lock page, as its own
// Acquire stream says, with every holder listed there and counted in the
// lock table, its one waiter counted as one; an election is listed as
// an election under its own name — never with its NUL marker — and its
// page shows its leader.
func TestBrowserSemaphoreAndElection(t *testing.T) {
	g := startGateway(t)
	for _, c := range []string{"a", "b"} {
		resp, err := g.Client.TryAcquire(ctxT(t), connect.NewRequest(&v1.TryAcquireRequest{Name: "pool", TtlMs: 60_000, ClientId: c, Limit: 2}))
		if err != nil || !resp.Msg.Acquired {
			t.Fatalf("TryAcquire(pool, limit 2) for %s = %v, %v", c, resp, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	st, err := g.Client.Acquire(ctx, connect.NewRequest(&v1.AcquireRequest{Name: "pool", TtlMs: 60_000, ClientId: "c", Limit: 2}))
	if err != nil || !st.Receive() || st.Msg().GetQueued() == nil {
		t.Fatalf("Acquire(pool, limit 2) for c: %v, %v", st.Msg(), err)
	}
	defer st.Close()
	streamPos := st.Msg().GetQueued().Position
	es, err := leasegatev1connect.NewElectionServiceClient(g.HTTP, g.URL).Campaign(ctx, connect.NewRequest(&v1.CampaignRequest{Name: "pool", TtlMs: 60_000, ClientId: "chief"}))
	if err != nil || !es.Receive() || es.Msg().GetElected() == nil {
		t.Fatalf("Campaign(pool): %v, %v", es.Msg(), err)
	}
	defer es.Close()

	b := newBrowser(t)
	run(t, b, 30*time.Second, "opening the lock page", chromedp.Navigate(g.URL+"/ui/#/lock/pool"))
	await(t, b, live(), `#holder tr[data-holder="a"]`)
	await(t, b, live(), `#holder tr[data-holder="b"]`)
	await(t, b, live(), fmt.Sprintf(`#queue tr[data-position="%d"][data-client="c"]`, streamPos))
	if streamPos != 1 {
		t.Errorf("the semaphore's next waiter is at position %d on its stream; want 1", streamPos)
	}

	run(t, b, 30*time.Second, "opening the lock table", chromedp.Navigate(g.URL+"/ui/#/locks"))
	await(t, b, live(), `#locks tr[data-election="pool"]`)
	await(t, b, live(), `#locks tr[data-lock="pool"]`)
	awaitText(t, b, `#locks tr[data-election="pool"] td[data-col="kind"]`, "election")
	awaitText(t, b, `#locks tr[data-lock="pool"] td[data-col="holder"]`, "a and 1 more")
	awaitText(t, b, `#locks tr[data-lock="pool"] td[data-col="waiters"]`, "1")
	awaitText(t, b, `#locks tr[data-election="pool"] td[data-col="holder"]`, "chief")
	if n := value(t, b, 5*time.Second, "looking for a NUL", chromedp.Evaluate[int](`[...document.querySelectorAll('#locks td')].filter((td) => /[\u0000-\u001f]/.test(td.textContent)).length`)); n != 0 {
		t.Errorf("%d cells of the lock table hold a control character", n)
	}
	run(t, b, 10*time.Second, "opening the election", chromedp.Click(chromedp.CSS(`#locks tr[data-election="pool"] a`)))
	await(t, b, live(), `#holder tr[data-holder="chief"]`)
	awaitText(t, b, `#lock-name`, "Election pool")
}

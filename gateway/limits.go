package gateway

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"connectrpc.com/connect"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasegate/leasegate/internal/clock"
	"github.com/leasegate/leasegate/locks"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// Limits bounds what one tenant or client can take. Zero values disable a
// limit; DefaultLimits caps what a single client could otherwise grow
// without bound (queues, waits, keys) and leaves rates to the operator.
type Limits struct {
	// TenantAcquireRate is acquires (and try-acquires) per second per tenant;
	// TenantAcquireBurst its burst.
	TenantAcquireRate  float64
	TenantAcquireBurst int
	// ClientAcquireRate is acquires per second per client: per tenant and
	// authenticated subject (a self-reported client id would let a caller
	// rotate past it; without authentication every caller is one client);
	// ClientAcquireBurst its burst.
	ClientAcquireRate  float64
	ClientAcquireBurst int
	// TenantRenewRate is renewals (locks and sessions) per second per
	// tenant; TenantRenewBurst its burst.
	TenantRenewRate  float64
	TenantRenewBurst int
	// ClientRenewRate is renewals per second per client (tenant and
	// subject: renewals carry no client id); ClientRenewBurst its burst.
	ClientRenewRate  float64
	ClientRenewBurst int
	// MaxWaitersPerName caps the keys (holder and waiters) of one name.
	MaxWaitersPerName int
	// MaxWaitersPerTenant caps the long-lived streams one gateway process
	// serves for a tenant at once: its waits (Acquire, Campaign) and its
	// watches (Observe, Watch, WatchHold).
	MaxWaitersPerTenant int
	// MaxKeysPerTenant caps the keys (held or waiting locks) a tenant has on
	// each shard, checked against a count refreshed at most once a second.
	MaxKeysPerTenant int
}

// DefaultLimits returns the caps a gateway ships with: 10,000 holders and
// waiters per name, 10,000 open waits per tenant on each gateway process
// (each costs a stream and a goroutine, tens of KiB), 1,000,000 held or
// waiting locks per tenant on each shard, and no rate limits.
func DefaultLimits() Limits {
	return Limits{MaxWaitersPerName: 10_000, MaxWaitersPerTenant: 10_000, MaxKeysPerTenant: 1_000_000}
}

// ErrLimited reports a refused call; the gateway answers resource_exhausted
// (429) with a retry hint.
var ErrLimited = errors.New("limit reached")

// The limits a refusal names, in its ErrorInfo metadata (v1.MetadataLimit)
// and in the refusal metric's kind label. errors.proto lists them.
const (
	limitTenantAcquireRate = "tenant_acquire_rate"
	limitClientAcquireRate = "client_acquire_rate"
	limitTenantRenewRate   = "tenant_renew_rate"
	limitClientRenewRate   = "client_renew_rate"
	limitTenantWaiters     = "tenant_waiters"
	limitTenantKeys        = "tenant_keys"
	limitNameWaiters       = "name_waiters"      // queue.ErrQueueFull
	limitTenantWatchKeys   = "tenant_watch_keys" // queue.ErrWatchBudget
	limitNameHolds         = "lock_holds"        // queue.ErrTooManyHolds
)

// limitedError carries the limit that refused a call, whether it is a rate
// (RATE_LIMITED) or a cap (QUOTA_EXCEEDED), and the retry hint.
type limitedError struct {
	kind  string
	rate  bool
	what  string
	retry time.Duration
}

func (e *limitedError) Error() string {
	if !e.rate {
		// A cap holds until some of the tenant's locks or waits end: a
		// retry alone does not help, so the message promises none.
		return fmt.Sprintf("%s (a cap: it frees as locks or waits end, not with time)", e.what)
	}
	return fmt.Sprintf("%s; retry in %s", e.what, e.retry.Round(time.Millisecond))
}
func (e *limitedError) Unwrap() error { return ErrLimited }

// maxLimiterKeys bounds each limiter table. Buckets are keyed by what the
// caller proved (tenant, subject), never by what it claims (client id), and
// past the bound the least recently used bucket is dropped: that is one
// idle caller's bucket, almost always full anyway, not everyone's budget.
var maxLimiterKeys = 100_000

type limiter struct {
	cfg Limits
	clk clock.Clock

	mu                                                     sync.Mutex
	tenantAcquire, clientAcquire, tenantRenew, clientRenew rateLimit
	waiting                                                map[string]int

	onRefusal func(kind string)
}

// rateLimit is one rate (off at 0 or below) and burst, its name and buckets.
type rateLimit struct {
	rate  float64
	burst int
	kind  string
	table *lru.Cache[string, *rate.Limiter]
}

func newLimiter(cfg Limits, clk clock.Clock) *limiter {
	limit := func(r float64, burst int, kind string) rateLimit {
		c, _ := lru.New[string, *rate.Limiter](maxLimiterKeys) // only a non-positive size fails
		return rateLimit{rate: r, burst: burst, kind: kind, table: c}
	}
	return &limiter{
		cfg: cfg, clk: clk, waiting: map[string]int{},
		tenantAcquire: limit(cfg.TenantAcquireRate, cfg.TenantAcquireBurst, limitTenantAcquireRate),
		clientAcquire: limit(cfg.ClientAcquireRate, cfg.ClientAcquireBurst, limitClientAcquireRate),
		tenantRenew:   limit(cfg.TenantRenewRate, cfg.TenantRenewBurst, limitTenantRenewRate),
		clientRenew:   limit(cfg.ClientRenewRate, cfg.ClientRenewBurst, limitClientRenewRate),
	}
}

// take charges one call to key's bucket: 0, or how long until it admits it.
func (r rateLimit) take(now time.Time, key string) time.Duration {
	if r.rate <= 0 {
		return 0
	}
	l, ok := r.table.Get(key)
	if !ok {
		l = rate.NewLimiter(rate.Limit(r.rate), max(r.burst, 1))
		r.table.Add(key, l)
	}
	res := l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// refuse counts a refusal; isRate's retry hint is when the rate allows a call.
func (l *limiter) refuse(kind, what string, retry time.Duration, isRate bool) error {
	if l.onRefusal != nil {
		l.onRefusal(kind)
	}
	return &limitedError{kind: kind, rate: isRate, what: what, retry: retry}
}

// acquire charges one acquire (or lookup) to the tenant and client.
func (l *limiter) acquire(id Identity) error {
	return l.charge(id, "acquire", l.tenantAcquire, l.clientAcquire)
}

// renew charges one renewal to the tenant and the client.
func (l *limiter) renew(id Identity) error {
	return l.charge(id, "renew", l.tenantRenew, l.clientRenew)
}

func (l *limiter) charge(id Identity, what string, tenant, client rateLimit) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := tenant.take(l.clk.Now(), id.Tenant); d > 0 {
		return l.refuse(tenant.kind, fmt.Sprintf("tenant %q is over its %s rate of %g/s", id.Tenant, what, tenant.rate), d, true)
	}
	if d := client.take(l.clk.Now(), id.Tenant+"\x00"+id.Method+"\x00"+id.Subject); d > 0 {
		return l.refuse(client.kind, fmt.Sprintf("this client is over its %s rate of %g/s", what, client.rate), d, true)
	}
	return nil
}

// startWait counts one open stream (a wait or a watch) for the tenant
// against MaxWaitersPerTenant; the returned func ends it.
func (l *limiter) startWait(id Identity) (func(), error) {
	max := l.cfg.MaxWaitersPerTenant
	if max <= 0 {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting[id.Tenant] >= max {
		return nil, l.refuse(limitTenantWaiters, fmt.Sprintf("tenant %q has %d waits and watches open on this gateway, the limit", id.Tenant, max), time.Second, false)
	}
	l.waiting[id.Tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.waiting[id.Tenant]--; l.waiting[id.Tenant] <= 0 {
				delete(l.waiting, id.Tenant)
			}
		})
	}, nil
}

// capped makes a fleet's key cap refusal (locks.ErrKeyCap) the limit's
// (tenant_keys), so it is counted and answered as every limit is.
func (l *limiter) capped(err error) error {
	if errors.Is(err, locks.ErrKeyCap) {
		return l.refuse(limitTenantKeys, err.Error(), time.Second, false)
	}
	return err
}

// limitedToConnect builds a limit's resource_exhausted error: an ErrorInfo
// naming the limit, rate (RATE_LIMITED) or cap (QUOTA_EXCEEDED), and a RetryInfo.
func limitedToConnect(err error) *connect.Error {
	var le *limitedError
	if !errors.As(err, &le) {
		return nil
	}
	ce := connect.NewError(connect.CodeResourceExhausted, errors.New(le.Error()))
	reason := v1.ErrorReason_QUOTA_EXCEEDED
	if le.rate {
		reason = v1.ErrorReason_RATE_LIMITED
	}
	addDetail(ce, &errdetails.ErrorInfo{Reason: reason.String(), Domain: v1.ErrorDomain, Metadata: map[string]string{v1.MetadataLimit: le.kind}})
	addDetail(ce, &errdetails.RetryInfo{RetryDelay: durationpb.New(le.retry)})
	return ce
}

// retryAfterSeconds is the Retry-After value for err, at least 1.
func retryAfterSeconds(err error) int {
	var le *limitedError
	if errors.As(err, &le) {
		return max(1, int(math.Ceil(le.retry.Seconds())))
	}
	return 1
}

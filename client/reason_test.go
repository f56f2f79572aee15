package client_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/leasegate/leasegate/client"
	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// The reason strings are wire format: gateways and SDKs of different
// versions exchange them, so the enum's names never change. The SDK's
// Reason constants are the enum's values, one for each.
func TestReasonWireStrings(t *testing.T) {
	seen := map[v1.ErrorReason]bool{}
	for _, tc := range []struct {
		reason v1.ErrorReason
		wire   string
	}{
		{client.ReasonExpired, "LOCK_EXPIRED"},
		{client.ReasonStolen, "LOCK_STOLEN"},
		{client.ReasonLeaseLost, "LEASE_LOST"},
		{client.ReasonSessionLost, "SESSION_LOST"},
		{client.ReasonSessionShardMissing, "SESSION_SHARD_MISSING"},
		{client.ReasonWaitTimeout, "WAIT_TIMEOUT"},
		{client.ReasonShuttingDown, "SHUTTING_DOWN"},
		{client.ReasonShardUnavailable, "SHARD_UNAVAILABLE"},
		{client.ReasonResharding, "RESHARDING"},
		{client.ReasonSuperseded, "SUPERSEDED"},
		{client.ReasonRateLimited, "RATE_LIMITED"},
		{client.ReasonQuotaExceeded, "QUOTA_EXCEEDED"},
		{client.ReasonPermissionDenied, "PERMISSION_DENIED"},
		{client.ReasonNotOwner, "NOT_OWNER"},
		{client.ReasonLimitMismatch, "LIMIT_MISMATCH"},
		{client.ReasonReleased, "LOCK_RELEASED"},
		{client.ReasonEvicted, "LOCK_EVICTED"},
	} {
		seen[tc.reason] = true
		if got := tc.reason.String(); got != tc.wire {
			t.Errorf("%d.String() = %q; want %q", tc.reason, got, tc.wire)
		}
		if got := client.Reason(withInfo(tc.wire, v1.ErrorDomain)); got != tc.reason {
			t.Errorf("Reason(an error with reason %q) = %v; want %v", tc.wire, got, tc.reason)
		}
	}
	for n, name := range v1.ErrorReason_name {
		if r := v1.ErrorReason(n); r != v1.ErrorReason_ERROR_REASON_UNSPECIFIED && !seen[r] {
			t.Errorf("the API's reason %s has no Reason constant in the SDK", name)
		}
	}
}

// A reason from another domain, one this SDK does not know, or none at all
// is unspecified.
func TestReasonUnspecified(t *testing.T) {
	for _, err := range []error{
		withInfo("LOCK_EXPIRED", "example.com"),
		withInfo("SOMETHING_NEWER", v1.ErrorDomain),
		connect.NewError(connect.CodeUnavailable, errors.New("down")),
		errors.New("not from a gateway"),
	} {
		if got := client.Reason(err); got != v1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			t.Errorf("Reason(%v) = %v; want ERROR_REASON_UNSPECIFIED", err, got)
		}
	}
}

func withInfo(reason, domain string) error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("test"))
	d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: reason, Domain: domain})
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

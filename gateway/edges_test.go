package gateway_test

import (
	"testing"

	"connectrpc.com/connect"

	v1 "github.com/leasegate/leasegate/proto/leasegate/v1"
)

// wait_timeout_ms is checked in its own unit before any conversion: huge
// values used to overflow the conversion and pass the range check, one of
// them becoming "wait forever".
func TestWaitTimeoutOutOfRangeIsRefused(t *testing.T) {
	g := startGateway(t, "")
	holder := tryAcquire(t, g, "x")
	for _, ms := range []int64{9223372036854776, 288230376151711744, 1 << 62, 3600_001} {
		st, err := g.client.Acquire(ctxT(t), connect.NewRequest(&v1.AcquireRequest{Name: "x", TtlMs: 10000, WaitTimeoutMs: ms}))
		if err == nil {
			for st.Receive() {
				if st.Msg().GetQueued() != nil {
					err = nil
					break
				}
			}
			if err == nil {
				err = st.Err()
			}
			st.Close()
		}
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Acquire with wait_timeout_ms %d = %v; want invalid_argument", ms, err)
		}
	}
	release(t, g, holder)
}

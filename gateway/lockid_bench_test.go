package gateway_test

import (
	"strings"
	"testing"

	"github.com/leasegate/leasegate/gateway"
	"github.com/leasegate/leasegate/queue"
)

// BenchmarkLockIDRoundTrip signs and verifies a lock id, as a grant and its
// release do.
func BenchmarkLockIDRoundTrip(b *testing.B) {
	keys, err := gateway.NewIDKeys(gateway.IDKey{ID: 1, Secret: []byte(strings.Repeat("k", gateway.MinIDKeyLen))})
	if err != nil {
		b.Fatal(err)
	}
	id := gateway.LockID{Tenant: "t", Shard: "main", Handle: queue.Handle{
		Name: "orders/42", WaiterID: "00112233445566778899aabbccddeeff", Lease: 7, Revision: 42, Epoch: 1,
	}}
	b.ReportAllocs()
	for b.Loop() {
		s := gateway.EncodeLockID(keys, id)
		if _, err := gateway.DecodeLockID(keys, s); err != nil {
			b.Fatal(err)
		}
	}
}

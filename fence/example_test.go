package fence_test

import (
	"context"
	"fmt"

	"github.com/leasegate/leasegate/fence"
)

// The fencing dance on a Memory store: client B holds the lock with token
// 11 and writes; client A, whose lease expired during a pause, writes late
// with token 10 and is refused, so its write does not run. SQLGuard and
// EtcdGuard do the same inside a database transaction.
func ExampleMemory_Write() {
	ctx := context.Background()
	store := fence.NewMemory()
	status := "new"
	setStatus := func(s string) func() error {
		return func() error { status = s; return nil }
	}
	fmt.Println(store.Write(ctx, "order:42", 11, setStatus("shipped")))   // client B
	fmt.Println(store.Write(ctx, "order:42", 10, setStatus("cancelled"))) // client A, late
	fmt.Println(status)
	// Output:
	// <nil>
	// fence: stale token 10 for "order:42": highest accepted is 11
	// shipped
}

package fencetest_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasegate/leasegate/fence"
)

// TestOrdersDance is the fencing dance (see fence.Orders) on the orders table.
func TestOrdersDance(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := d.open(t, 4)
			orders, err := fence.NewOrders(ctx, newSQLGuard(t, db, d.dialect), tempTable(t, db, "orders"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := orders.Get(ctx, "42"); !errors.Is(err, fence.ErrNotFound) {
				t.Fatalf("Get(42) before any write = %v; want ErrNotFound", err)
			}
			// A acquires (token 10) and starts; its lease lapses in a pause.
			if err := orders.Put(ctx, "42", "processing", 10); err != nil {
				t.Fatal(err)
			}
			// B acquires (token 11) and writes.
			if err := orders.Put(ctx, "42", "shipped", 11); err != nil {
				t.Fatal(err)
			}
			// A wakes up and writes with its old token.
			err = orders.Put(ctx, "42", "cancelled", 10)
			if want := `fence: stale token 10 for "order:42": highest accepted is 11`; !errors.Is(err, fence.ErrStaleToken) || err.Error() != want {
				t.Fatalf("A's late Put = %v; want %q", err, want)
			}
			got, err := orders.Get(ctx, "42")
			if want := (fence.Order{ID: "42", Status: "shipped", Token: 11}); err != nil || got != want {
				t.Fatalf("Get(42) = %+v, %v; want %+v", got, err, want)
			}
			// B may write again with the same token.
			if err := orders.Put(ctx, "42", "delivered", 11); err != nil {
				t.Fatalf("B's second Put = %v; want nil", err)
			}
			if got, _ := orders.Get(ctx, "42"); got.Status != "delivered" || got.Token != 11 {
				t.Fatalf("Get(42) = %+v; want delivered by 11", got)
			}
			if err := orders.Put(ctx, "", "x", 1); !errors.Is(err, fence.ErrEmptyResource) {
				t.Errorf(`Put("") = %v; want ErrEmptyResource`, err)
			}
			if _, err := fence.NewOrders(ctx, newSQLGuard(t, db, d.dialect), "orders;"); !errors.Is(err, fence.ErrInvalidConfig) {
				t.Errorf(`NewOrders(table "orders;") = %v; want ErrInvalidConfig`, err)
			}
		})
	}
}

// TestOrdersRace has writers with distinct tokens race Put on fresh orders:
// each order ends up written by the highest token, with its status.
func TestOrdersRace(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			const writers, rounds = 4, 200
			ctx := testCtx(t)
			db := d.open(t, writers)
			orders, err := fence.NewOrders(ctx, newSQLGuard(t, db, d.dialect), tempTable(t, db, "orders"))
			if err != nil {
				t.Fatal(err)
			}
			for r := range rounds {
				id := fmt.Sprint(r)
				start := make(chan struct{})
				errs := make([]error, writers)
				var wg sync.WaitGroup
				for i := range writers {
					// Tokens r*writers+1 … r*writers+writers, started in
					// reverse so the highest does not simply go first.
					tok := int64(r*writers + writers - i)
					wg.Go(func() {
						<-start
						errs[i] = orders.Put(ctx, id, fmt.Sprint("by ", tok), tok)
					})
				}
				close(start)
				wg.Wait()
				for i, err := range errs {
					if err != nil && !errors.Is(err, fence.ErrStaleToken) {
						t.Fatalf("order %s writer %d: %v", id, i, err)
					}
				}
				if errs[0] != nil {
					t.Fatalf("order %s: the highest token was refused: %v", id, errs[0])
				}
				top := int64(r*writers + writers)
				got, err := orders.Get(ctx, id)
				if want := (fence.Order{ID: id, Status: fmt.Sprint("by ", top), Token: top}); err != nil || got != want {
					t.Fatalf("Get(%s) = %+v, %v; want %+v", id, got, err, want)
				}
			}
		})
	}
}

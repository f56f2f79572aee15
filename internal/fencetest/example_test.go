package fencetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/leasegate/leasegate/fence"
)

// The fencing dance on SQLite with fence.SQLGuard: client B holds the lock
// with token 11 and writes; client A, whose lease expired during a pause,
// writes late with token 10 and is refused inside the same transaction as
// the write. (The examples need an SQL driver, which the fence module does
// not require, so they live here.)
func Example_sqlGuardWrite() {
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", filepath.Join(dir, "shop.db"))
	defer db.Close()
	ctx := context.Background()

	g, err := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)`)
	setStatus := func(status string) func(*sql.Tx) error {
		return func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT OR REPLACE INTO orders VALUES ('42', ?)`, status)
			return err
		}
	}
	fmt.Println(g.Write(ctx, "order:42", 11, setStatus("shipped")))   // client B
	fmt.Println(g.Write(ctx, "order:42", 10, setStatus("cancelled"))) // client A, late

	var status string
	_ = db.QueryRow(`SELECT status FROM orders WHERE id = '42'`).Scan(&status)
	fmt.Println(status)
	// Output:
	// <nil>
	// fence: stale token 10 for "order:42": highest accepted is 11
	// shipped
}

// fence.Orders records the token of the write that set each row.
func Example_orders() {
	dir, _ := os.MkdirTemp("", "fence-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", filepath.Join(dir, "shop.db"))
	defer db.Close()
	ctx := context.Background()

	g, _ := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite})
	orders, _ := fence.NewOrders(ctx, g, "")
	_ = orders.Put(ctx, "42", "shipped", 11)
	err := orders.Put(ctx, "42", "cancelled", 10)
	o, _ := orders.Get(ctx, "42")
	fmt.Println(o.Status, o.Token, err)
	// Output: shipped 11 fence: stale token 10 for "order:42": highest accepted is 11
}

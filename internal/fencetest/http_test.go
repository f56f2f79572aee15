package fencetest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
)

// TestMiddlewareStoreDown uses a real SQL guard whose database is closed: the
// request fails with 503 and the cause stays private.
func TestMiddlewareStoreDown(t *testing.T) {
	db := openSQLite(t, 1)
	g, err := fence.NewSQLGuard(testCtx(t), db, fence.SQLConfig{Dialect: fence.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	srv := storetest.NewServer(t, g)
	if code, _ := srv.Do(t, "order:42", "1"); code != 200 {
		t.Fatalf("status %d with the store up; want 200", code)
	}
	db.Close()
	code, body := srv.Do(t, "order:42", "2")
	var got fence.ErrorBody
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != 503 || got.Error != fence.CodeUnavailable || strings.Contains(body, "closed") {
		t.Errorf("store down: %d %q; want 503 %q without the cause", code, body, fence.CodeUnavailable)
	}
	if n := srv.Calls(); n != 1 {
		t.Errorf("handler ran %d times; want 1 (not for the failed request)", n)
	}
}

package fencetest_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/leasegate/leasegate/fence"
)

// envPostgres names the environment variable holding the DSN of a
// PostgreSQL database for tests; .ci/postgres.sh sets it.
const envPostgres = "LEASEGATE_TEST_POSTGRES"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testCtx is a context for one test, cancelled at its end.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openSQLite opens a file database in a fresh temporary directory, in WAL
// mode and with no busy timeout of its own: the guard must set one.
func openSQLite(t testing.TB, conns int) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "fence.db") + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

// openPostgres connects to the database in LEASEGATE_TEST_POSTGRES, or skips.
func openPostgres(t testing.TB, conns int) *sql.DB {
	t.Helper()
	dsn := os.Getenv(envPostgres)
	if dsn == "" {
		t.Skip(envPostgres + " is not set: no PostgreSQL to test against (source .ci/postgres.sh to start one)")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(testCtx(t)); err != nil {
		t.Fatalf("PostgreSQL at %s=%q: %v", envPostgres, dsn, err)
	}
	return db
}

// sqlDB is one database under test.
type sqlDB struct {
	name    string
	dialect fence.Dialect
	open    func(t testing.TB, conns int) *sql.DB
}

var sqlDBs = []sqlDB{
	{"sqlite", fence.SQLite, openSQLite},
	{"postgres", fence.PostgreSQL, openPostgres},
}

// tempTable returns a table name no other test run uses and drops the table
// at the end of the test, so tests can share one PostgreSQL database.
func tempTable(t testing.TB, db *sql.DB, base string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", base, time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
			t.Errorf("DROP TABLE %s: %v", name, err)
		}
	})
	return name
}

// newSQLGuard returns a guard on a fresh token table in db.
func newSQLGuard(t testing.TB, db *sql.DB, d fence.Dialect) *fence.SQLGuard {
	t.Helper()
	g, err := fence.NewSQLGuard(testCtx(t), db, fence.SQLConfig{Dialect: d, Table: tempTable(t, db, "fence_tokens")})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// arg is the n-th (1-based) positional parameter in d's SQL, for the
// tests' own statements.
func arg(d fence.Dialect, n int) string {
	if d == fence.PostgreSQL {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n)
}

func mustExec(t testing.TB, db *sql.DB, stmt string) {
	t.Helper()
	if _, err := db.ExecContext(testCtx(t), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

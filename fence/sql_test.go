package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSQLConfigValidate(t *testing.T) {
	good := DefaultSQLConfig(SQLite)
	if err := good.Validate(); err != nil {
		t.Fatalf("DefaultSQLConfig(SQLite).Validate() = %v; want nil", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*SQLConfig)
		want   string // in the message
	}{
		{"no dialect", func(c *SQLConfig) { c.Dialect = 0 }, "Dialect Dialect(0)"},
		{"unknown dialect", func(c *SQLConfig) { c.Dialect = 7 }, "Dialect Dialect(7)"},
		{"injection", func(c *SQLConfig) { c.Table = "t; DROP TABLE x" }, `Table "t; DROP TABLE x"`},
		{"quoted", func(c *SQLConfig) { c.Table = `"t"` }, `Table "\"t\""`},
		{"empty table", func(c *SQLConfig) { c.Table = "" }, `Table ""`},
		{"three parts", func(c *SQLConfig) { c.Table = "a.b.c" }, `Table "a.b.c"`},
		{"long", func(c *SQLConfig) { c.Table = strings.Repeat("t", 64) }, "at most 63 bytes"},
		{"negative busy", func(c *SQLConfig) { c.BusyTimeout = -time.Second }, "BusyTimeout -1s"},
		{"huge busy", func(c *SQLConfig) { c.BusyTimeout = 25 * time.Hour }, "BusyTimeout 25h0m0s"},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v; want ErrInvalidConfig mentioning %s", tc.name, err, tc.want)
		}
	}
	for _, ok := range []string{"fence_tokens", "public.fence_tokens", "_t1"} {
		c := good
		c.Table = ok
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() with Table %q = %v; want nil", ok, err)
		}
	}
}

func TestSQLSemantics(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t, 4)
			testStoreSemantics(t, newSQLGuard(t, db, d.dialect))
		})
	}
}

func TestNewSQLGuardDefaultsAndIdempotentSchema(t *testing.T) {
	db := openSQLite(t, 2)
	ctx := testCtx(t)
	g, err := NewSQLGuard(ctx, db, SQLConfig{Dialect: SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Config(); got != DefaultSQLConfig(SQLite) {
		t.Errorf("Config() = %+v; want %+v", got, DefaultSQLConfig(SQLite))
	}
	if err := g.Accept(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	// A second guard on the same table sees the first one's tokens.
	g2, err := NewSQLGuard(ctx, db, SQLConfig{Dialect: SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Accept(ctx, "k", 2); !errors.Is(err, ErrStaleToken) {
		t.Errorf("second guard Accept(k, 2) after 3 = %v; want ErrStaleToken", err)
	}
	if _, err := NewSQLGuard(ctx, db, SQLConfig{Dialect: SQLite, Table: "x y"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf(`NewSQLGuard with Table "x y" = %v; want ErrInvalidConfig`, err)
	}
}

// TestSQLWriteIsOneTransaction checks that the token and fn's statements
// commit or roll back together, and that fn never runs for a stale token.
func TestSQLWriteIsOneTransaction(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := d.open(t, 4)
			g := newSQLGuard(t, db, d.dialect)
			data := tempTable(t, db, "fence_data")
			mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (resource TEXT PRIMARY KEY, value TEXT NOT NULL)", data))
			put := func(value string) func(*sql.Tx) error {
				return func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, fmt.Sprintf(
						"INSERT INTO %s (resource, value) VALUES (%s, %s) ON CONFLICT (resource) DO UPDATE SET value = excluded.value",
						data, d.dialect.arg(1), d.dialect.arg(2)), "k", value)
					return err
				}
			}
			read := func() string {
				var v string
				err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT value FROM %s WHERE resource = %s", data, d.dialect.arg(1)), "k").Scan(&v)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					t.Fatal(err)
				}
				return v
			}

			// fn fails: neither its write nor the token stays.
			boom := errors.New("boom")
			err := g.Write(ctx, "k", 5, func(tx *sql.Tx) error {
				if err := put("from 5")(tx); err != nil {
					return err
				}
				return boom
			})
			if err != boom {
				t.Fatalf("Write with failing fn = %v; want %v", err, boom)
			}
			if _, ok, err := g.Highest(ctx, "k"); err != nil || ok {
				t.Fatalf("Highest after rolled-back write = _, %v, %v; want false, nil", ok, err)
			}
			if v := read(); v != "" {
				t.Fatalf("data after rolled-back write = %q; want none", v)
			}

			if err := g.Write(ctx, "k", 11, put("from 11")); err != nil {
				t.Fatal(err)
			}
			ran := false
			err = g.Write(ctx, "k", 10, func(tx *sql.Tx) error { ran = true; return put("from 10")(tx) })
			if !errors.Is(err, ErrStaleToken) || ran {
				t.Fatalf("Write(k, 10) after 11 = %v, fn ran %v; want ErrStaleToken, false", err, ran)
			}
			if err := g.Write(ctx, "k", 11, put("from 11 again")); err != nil {
				t.Fatalf("Write(k, 11) again = %v; want nil", err)
			}
			if v := read(); v != "from 11 again" {
				t.Fatalf("data = %q; want %q", v, "from 11 again")
			}
		})
	}
}

// sqlRaceStore fences a data table and an accept log with g. The log's
// sequence numbers are taken inside the fenced transaction; since writers of
// one resource are serialised by the guard, their order is accept order.
func sqlRaceStore(t *testing.T, db *sql.DB, g *SQLGuard) raceStore {
	d := g.cfg.Dialect
	logT, dataT := tempTable(t, db, "fence_race_log"), tempTable(t, db, "fence_race_data")
	seq := "seq INTEGER PRIMARY KEY AUTOINCREMENT"
	if d == PostgreSQL {
		seq = "seq BIGSERIAL PRIMARY KEY"
	}
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (%s, resource TEXT NOT NULL, token BIGINT NOT NULL)", logT, seq))
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)", dataT))
	insLog := fmt.Sprintf("INSERT INTO %s (resource, token) VALUES (%s, %s)", logT, d.arg(1), d.arg(2))
	putData := fmt.Sprintf("INSERT INTO %s (resource, token) VALUES (%s, %s) ON CONFLICT (resource) DO UPDATE SET token = excluded.token",
		dataT, d.arg(1), d.arg(2))
	return raceStore{
		write: func(ctx context.Context, res string, tok int64) error {
			return g.Write(ctx, res, tok, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, insLog, res, tok); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, putData, res, tok)
				return err
			})
		},
		accepted: func(ctx context.Context, res string) ([]int64, error) {
			rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT token FROM %s WHERE resource = %s ORDER BY seq", logT, d.arg(1)), res)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var log []int64
			for rows.Next() {
				var tok int64
				if err := rows.Scan(&tok); err != nil {
					return nil, err
				}
				log = append(log, tok)
			}
			return log, rows.Err()
		},
		data: func(ctx context.Context, res string) (int64, bool, error) {
			var tok int64
			err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT token FROM %s WHERE resource = %s", dataT, d.arg(1)), res).Scan(&tok)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return tok, err == nil, err
		},
	}
}

func TestSQLRace(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			const writers = 4
			db := d.open(t, writers)
			g := newSQLGuard(t, db, d.dialect)
			testRace(t, sqlRaceStore(t, db, g), "sql", raceSizes{writers: writers, rounds: 1000, perWriter: 1000})
		})
	}
}

func mustExec(t testing.TB, db *sql.DB, stmt string) {
	t.Helper()
	if _, err := db.ExecContext(testCtx(t), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

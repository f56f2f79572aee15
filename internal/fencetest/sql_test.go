package fencetest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/leasegate/leasegate/fence"
	"github.com/leasegate/leasegate/fence/storetest"
)

func TestSQLSemantics(t *testing.T) {
	for _, d := range sqlDBs {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t, 4)
			storetest.Semantics(t, newSQLGuard(t, db, d.dialect))
		})
	}
}

func TestNewSQLGuardDefaultsAndIdempotentSchema(t *testing.T) {
	db := openSQLite(t, 2)
	ctx := testCtx(t)
	g, err := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Config(); got != fence.DefaultSQLConfig(fence.SQLite) {
		t.Errorf("Config() = %+v; want %+v", got, fence.DefaultSQLConfig(fence.SQLite))
	}
	if err := g.Accept(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	// A second guard on the same table sees the first one's tokens.
	g2, err := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Accept(ctx, "k", 2); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("second guard Accept(k, 2) after 3 = %v; want ErrStaleToken", err)
	}
	if _, err := fence.NewSQLGuard(ctx, db, fence.SQLConfig{Dialect: fence.SQLite, Table: "x y"}); !errors.Is(err, fence.ErrInvalidConfig) {
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
						data, arg(d.dialect, 1), arg(d.dialect, 2)), "k", value)
					return err
				}
			}
			read := func() string {
				var v string
				err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT value FROM %s WHERE resource = %s", data, arg(d.dialect, 1)), "k").Scan(&v)
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
			if !errors.Is(err, fence.ErrStaleToken) || ran {
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
func sqlRaceStore(t *testing.T, db *sql.DB, g *fence.SQLGuard) storetest.RaceStore {
	d := g.Config().Dialect
	logT, dataT := tempTable(t, db, "fence_race_log"), tempTable(t, db, "fence_race_data")
	seq := "seq INTEGER PRIMARY KEY AUTOINCREMENT"
	if d == fence.PostgreSQL {
		seq = "seq BIGSERIAL PRIMARY KEY"
	}
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (%s, resource TEXT NOT NULL, token BIGINT NOT NULL)", logT, seq))
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)", dataT))
	insLog := fmt.Sprintf("INSERT INTO %s (resource, token) VALUES (%s, %s)", logT, arg(d, 1), arg(d, 2))
	putData := fmt.Sprintf("INSERT INTO %s (resource, token) VALUES (%s, %s) ON CONFLICT (resource) DO UPDATE SET token = excluded.token",
		dataT, arg(d, 1), arg(d, 2))
	return storetest.RaceStore{
		Write: func(ctx context.Context, res string, tok int64) error {
			return g.Write(ctx, res, tok, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, insLog, res, tok); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, putData, res, tok)
				return err
			})
		},
		Accepted: func(ctx context.Context, res string) ([]int64, error) {
			rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT token FROM %s WHERE resource = %s ORDER BY seq", logT, arg(d, 1)), res)
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
		Data: func(ctx context.Context, res string) (int64, bool, error) {
			var tok int64
			err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT token FROM %s WHERE resource = %s", dataT, arg(d, 1)), res).Scan(&tok)
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
			storetest.Race(t, sqlRaceStore(t, db, g), "sql", storetest.RaceSizes{Writers: writers, Rounds: 1000, PerWriter: 1000})
		})
	}
}

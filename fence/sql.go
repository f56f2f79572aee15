package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Dialect names the SQL database engine behind an SQLGuard. The set is
// closed: the SQL that differs between engines lives in this file, one
// explicit text per engine, rather than being generated.
type Dialect int

const (
	// SQLite is SQLite 3.35 or newer, e.g. through modernc.org/sqlite
	// (driver name "sqlite"). SQLite runs one writer at a time; a writer
	// waits up to SQLConfig.BusyTimeout for the previous one.
	SQLite Dialect = iota + 1
	// PostgreSQL is PostgreSQL 9.5 or newer, e.g. through
	// github.com/jackc/pgx/v5/stdlib (driver name "pgx"). The token row's
	// lock serialises writers of one resource.
	PostgreSQL
)

// String returns "sqlite", "postgresql" or "Dialect(n)".
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case PostgreSQL:
		return "postgresql"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// arg is the n-th (1-based) positional parameter.
func (d Dialect) arg(n int) string {
	if d == PostgreSQL {
		return "$" + strconv.Itoa(n)
	}
	return "?" + strconv.Itoa(n)
}

// Defaults of SQLConfig.
const (
	// DefaultSQLTable is the token table's default name.
	DefaultSQLTable = "fence_tokens"
	// DefaultBusyTimeout is how long an SQLite writer waits for another
	// writer by default.
	DefaultBusyTimeout = 5 * time.Second
)

// SQLConfig configures an SQLGuard.
type SQLConfig struct {
	// Dialect is the database engine. Required.
	Dialect Dialect
	// Table is the name of the token table, one row per resource:
	// (resource TEXT PRIMARY KEY, token BIGINT NOT NULL). An identifier,
	// optionally schema-qualified (letters, digits, '_'; at most 63 bytes
	// per part). Created if missing. Empty means DefaultSQLTable.
	Table string
	// BusyTimeout is, for SQLite only, how long a write waits for another
	// connection's write transaction before failing with SQLITE_BUSY. The
	// guard sets it on the connection at the start of every write. Zero
	// means DefaultBusyTimeout; the maximum is 24 h.
	BusyTimeout time.Duration
}

// DefaultSQLConfig returns the configuration NewSQLGuard would use for d.
func DefaultSQLConfig(d Dialect) SQLConfig {
	return SQLConfig{Dialect: d, Table: DefaultSQLTable, BusyTimeout: DefaultBusyTimeout}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// Validate reports the first invalid field, naming the value and what is
// allowed. It does not fill in defaults: empty fields are errors here.
func (c SQLConfig) Validate() error {
	if c.Dialect != SQLite && c.Dialect != PostgreSQL {
		return fmt.Errorf("%w: Dialect %v; want SQLite or PostgreSQL", ErrInvalidConfig, c.Dialect)
	}
	if !identRE.MatchString(c.Table) {
		return fmt.Errorf("%w: Table %q; want an SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes, optionally schema.table)", ErrInvalidConfig, c.Table)
	}
	if c.BusyTimeout <= 0 || c.BusyTimeout > 24*time.Hour {
		return fmt.Errorf("%w: BusyTimeout %v; want more than 0 and at most 24h", ErrInvalidConfig, c.BusyTimeout)
	}
	return nil
}

// withDefaults fills empty fields.
func (c SQLConfig) withDefaults() SQLConfig {
	if c.Table == "" {
		c.Table = DefaultSQLTable
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	return c
}

// SQLGuard fences writes into an SQL database: the token check, the token
// record and the caller's own statements run in one transaction, so of two
// racing writers at most the higher-token one can pass, and a refused write
// leaves no trace. On PostgreSQL the transaction uses the database's default
// isolation; READ COMMITTED (PostgreSQL's default) makes a racing writer wait
// for the row, while REPEATABLE READ or SERIALIZABLE may fail it with a
// serialization error instead (nothing is accepted then; retry). An SQLGuard
// is safe for concurrent use.
type SQLGuard struct {
	db      *sql.DB
	cfg     SQLConfig
	upsert  string // records the token if not stale; returns it, or no row if stale
	highest string // reads the stored token
}

// NewSQLGuard fills empty fields of cfg with defaults, validates it and
// creates the token table if it does not exist. It blocks for that one
// statement. The caller keeps ownership of db.
func NewSQLGuard(ctx context.Context, db *sql.DB, cfg SQLConfig) (*SQLGuard, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &SQLGuard{db: db, cfg: cfg}
	d, t := cfg.Dialect, cfg.Table
	// The upsert is the check: the WHERE clause refuses a lower token, and
	// because it runs on the conflicting row under that row's write lock
	// (PostgreSQL) or the database write lock (SQLite), no other writer
	// can change the row between the comparison and the end of the
	// transaction. RETURNING yields no row when the WHERE clause refused.
	g.upsert = fmt.Sprintf(`INSERT INTO %s AS f (resource, token) VALUES (%s, %s)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token
RETURNING token`, t, d.arg(1), d.arg(2))
	g.highest = fmt.Sprintf(`SELECT token FROM %s WHERE resource = %s`, t, d.arg(1))
	create := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)`, t)
	if err := createTable(ctx, db, create); err != nil {
		return nil, fmt.Errorf("fence: create table %s: %w", t, err)
	}
	return g, nil
}

// createTable runs a CREATE TABLE IF NOT EXISTS statement. PostgreSQL can
// fail it with a unique violation when two sessions create the same table at
// once; the second attempt then finds the table and succeeds.
func createTable(ctx context.Context, db *sql.DB, stmt string) error {
	_, err := db.ExecContext(ctx, stmt)
	if err != nil && ctx.Err() == nil {
		_, err = db.ExecContext(ctx, stmt)
	}
	return err
}

// Config returns the guard's configuration with defaults filled in.
func (g *SQLGuard) Config() SQLConfig { return g.cfg }

// Write runs fn inside a transaction that first records token as the highest
// token for resource, and commits only if fn returns nil.
//
// If a higher token was already committed for resource, Write returns a
// *StaleTokenError and fn does not run. If fn returns an error, or the commit
// fails, the transaction is rolled back: nothing fn did and no token is kept,
// and the error is returned (fn's error as is). A nil fn only records the
// token.
//
// fn must do its work through tx and must not commit or roll it back. While
// fn runs, other writes of the same resource wait (on SQLite, all writes to
// the database wait); keep fn short. Write blocks until the commit, until
// ctx is done, or, on SQLite, until BusyTimeout passes waiting for the lock.
func (g *SQLGuard) Write(ctx context.Context, resource string, token int64, fn func(tx *sql.Tx) error) error {
	if err := validate(resource, token); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: begin write of %q: %w", resource, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit; the first error is the one reported
	if g.cfg.Dialect == SQLite {
		// Per connection, so set it on the one this transaction holds. The
		// upsert below is the transaction's first access to the database,
		// so it takes the write lock at once, waiting up to this long,
		// instead of reading first and failing on the upgrade.
		ms := strconv.FormatInt(g.cfg.BusyTimeout.Milliseconds(), 10)
		if _, err := tx.ExecContext(ctx, "PRAGMA busy_timeout = "+ms); err != nil {
			return fmt.Errorf("fence: set busy_timeout: %w", err)
		}
	}
	var got int64
	err = tx.QueryRowContext(ctx, g.upsert, resource, token).Scan(&got)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		var highest int64
		if err := tx.QueryRowContext(ctx, g.highest, resource).Scan(&highest); err != nil {
			return fmt.Errorf("fence: read highest token of %q: %w", resource, err)
		}
		return stale(resource, token, highest)
	case err != nil:
		return fmt.Errorf("fence: record token %d for %q: %w", token, resource, err)
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: commit write of %q with token %d: %w", resource, token, err)
	}
	return nil
}

// Accept records token as the highest token for resource unless it is lower
// than the current highest. It is Write with no statements of its own.
func (g *SQLGuard) Accept(ctx context.Context, resource string, token int64) error {
	return g.Write(ctx, resource, token, nil)
}

// Highest returns the highest committed token for resource, and false if
// none was ever committed. It does not wait for writes in progress.
func (g *SQLGuard) Highest(ctx context.Context, resource string) (int64, bool, error) {
	if resource == "" {
		return 0, false, ErrEmptyResource
	}
	var token int64
	err := g.db.QueryRowContext(ctx, g.highest, resource).Scan(&token)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("fence: read highest token of %q: %w", resource, err)
	}
	return token, true, nil
}

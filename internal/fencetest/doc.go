// Package fencetest tests the fencing library (fence/) against real
// databases: etcd (an embedded member per test), SQLite (modernc.org/sqlite)
// and PostgreSQL (pgx, at LEASEGATE_TEST_POSTGRES, which .ci/postgres.sh
// sets; the PostgreSQL cases skip without it). It holds only tests: fence is
// its own module, which must not require an etcd server or an SQL driver, so
// the tests that need them live here, in the root module, and check the
// guards with fence/storetest, as fence's own tests check Memory.
package fencetest

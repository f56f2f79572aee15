#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the fence tests (in
# internal/fencetest) and exports
#   LEASEGATE_TEST_POSTGRES=postgres://leasegate:leasegate@127.0.0.1:PORT/leasegate_test?sslmode=disable
#
# Meant to be SOURCED (". .ci/postgres.sh") so the export reaches the caller;
# it turns on `set -euo pipefail` in the calling shell, as CI wants.
#
# - If LEASEGATE_TEST_POSTGRES is already set, it does nothing: point it at
#   any database you like and the tests use that one.
# - If no PostgreSQL server binaries are found under /usr/lib/postgresql, it
#   installs Debian's `postgresql` package (needs root).
# - It never touches the system's own clusters: it runs initdb into a fresh
#   directory under ${TMPDIR:-/tmp} and starts the server on a free port on
#   127.0.0.1, as the `postgres` user when run as root (PostgreSQL refuses to
#   run as root), with durability off (fsync, synchronous_commit): test data
#   only.
# - It also exports LEASEGATE_TEST_POSTGRES_DIR (the data directory's parent)
#   and defines leasegate_postgres_stop, which stops the server and removes
#   the directory. CI can leave the server running: everything a CI run
#   started is ended after it.
#
# Silent on success; on failure it prints the server log and returns non-zero.
set -euo pipefail

leasegate_postgres_start() {
  if [[ -n "${LEASEGATE_TEST_POSTGRES:-}" ]]; then
    return 0
  fi

  local bindir
  bindir="$(leasegate_postgres_bindir)" || true
  if [[ -z "$bindir" ]]; then
    if [[ "$(id -u)" -ne 0 ]]; then
      echo "postgres.sh: no PostgreSQL server binaries and not root: install the postgresql package" >&2
      return 1
    fi
    local aptlog rc=0
    aptlog="$(mktemp)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$aptlog" 2>&1 || rc=$?
    # The package would create and start a system cluster on port 5432; a
    # policy-rc.d that exits 101 keeps it from starting (we run our own).
    local policy=/usr/sbin/policy-rc.d had_policy=0
    [[ -e "$policy" ]] && had_policy=1
    if [[ "$rc" -eq 0 && "$had_policy" -eq 0 ]]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy"
      chmod +x "$policy"
    fi
    if [[ "$rc" -eq 0 ]]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >>"$aptlog" 2>&1 || rc=$?
    fi
    if [[ "$had_policy" -eq 0 ]]; then
      rm -f "$policy"
    fi
    if [[ "$rc" -ne 0 ]]; then
      echo "postgres.sh: installing postgresql failed ($rc):" >&2
      cat "$aptlog" >&2
      rm -f "$aptlog"
      return 1
    fi
    rm -f "$aptlog"
    bindir="$(leasegate_postgres_bindir)" || {
      echo "postgres.sh: postgresql installed but no server binaries under /usr/lib/postgresql" >&2
      return 1
    }
  fi

  if [[ "$(id -u)" -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    echo "postgres.sh: running as root but there is no postgres user to run the server as" >&2
    return 1
  fi

  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/leasegate-pg.XXXXXX")"
  chmod 0755 "$dir"
  if [[ "$(id -u)" -eq 0 ]]; then
    chown postgres: "$dir"
  fi

  local log="$dir/server.log"
  if ! leasegate_postgres_run "$dir" "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
    >"$dir/initdb.log" 2>&1; then
    echo "postgres.sh: initdb failed:" >&2
    cat "$dir/initdb.log" >&2
    return 1
  fi

  # Try free-looking ports until one starts: another process may take a port
  # between the check and the bind, so the start itself is the real test.
  local port started=0 try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    port="$(leasegate_postgres_free_port)"
    if leasegate_postgres_run "$dir" "$bindir/pg_ctl" -D "$dir/data" -l "$log" -w -t 60 start -o \
      "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100" \
      >/dev/null 2>&1; then
      started=1
      break
    fi
  done
  if [[ "$started" -ne 1 ]]; then
    echo "postgres.sh: the server did not start; its log:" >&2
    cat "$log" >&2 || true
    return 1
  fi

  if ! "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres >/dev/null 2>"$dir/psql.log" <<'SQL'; then
CREATE ROLE leasegate LOGIN PASSWORD 'leasegate';
CREATE DATABASE leasegate_test OWNER leasegate;
SQL
    echo "postgres.sh: creating the role and database failed:" >&2
    cat "$dir/psql.log" >&2
    return 1
  fi

  export LEASEGATE_TEST_POSTGRES_DIR="$dir"
  export LEASEGATE_TEST_POSTGRES="postgres://leasegate:leasegate@127.0.0.1:$port/leasegate_test?sslmode=disable"
}

# leasegate_postgres_run DIR COMMAND...: runs COMMAND in DIR, as the postgres
# user when root (PostgreSQL refuses to run as root). DIR keeps the server
# from inheriting a working directory the postgres user cannot enter.
leasegate_postgres_run() {
  local dir="$1"
  shift
  if [[ "$(id -u)" -eq 0 ]]; then
    (cd "$dir" && runuser -u postgres -- "$@")
  else
    (cd "$dir" && "$@")
  fi
}

# leasegate_postgres_bindir prints the bin directory of the newest installed
# PostgreSQL server, or fails if there is none.
leasegate_postgres_bindir() {
  local d best=""
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/postgres" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/psql" ]] || continue
    if [[ -z "$best" ]] || [[ "$(basename "$(dirname "$d")")" -gt "$(basename "$(dirname "$best")")" ]]; then
      best="$d"
    fi
  done
  [[ -n "$best" ]] || return 1
  echo "$best"
}

# leasegate_postgres_free_port prints a port in 20000..59999 that nothing on
# 127.0.0.1 is listening on right now.
leasegate_postgres_free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    # A successful connect means something listens there.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
}

# leasegate_postgres_stop stops the server started above and removes its
# files. It does nothing if this script started no server.
leasegate_postgres_stop() {
  local dir="${LEASEGATE_TEST_POSTGRES_DIR:-}"
  [[ -n "$dir" && -d "$dir/data" ]] || return 0
  local bindir
  bindir="$(leasegate_postgres_bindir)" || return 1
  leasegate_postgres_run "$dir" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  rm -rf "$dir"
  unset LEASEGATE_TEST_POSTGRES LEASEGATE_TEST_POSTGRES_DIR
}

leasegate_postgres_start

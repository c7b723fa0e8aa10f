# Sourced by scripts/test.sh. pg_ensure exports JOBMESH_TEST_DATABASE_URL: the Postgres at
# 127.0.0.1:5432 (user postgres, trust) when one answers, else a private server this script
# installs from Debian's packages and starts on port 55432 under .data/pg, stopped on exit.

pg_ensure() {
  if [ -n "${JOBMESH_TEST_DATABASE_URL:-}" ]; then return 0; fi
  if pg_answers 127.0.0.1 5432; then
    export JOBMESH_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
    return 0
  fi
  echo "no Postgres at 127.0.0.1:5432; starting a private one on port 55432"
  local pgbin
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$pgbin" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
    pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  local dir="$ROOT/.data/pg"
  mkdir -p "$dir"
  chown -R postgres "$dir" 2>/dev/null || true
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    pg_as "$pgbin/initdb -D $dir/data -U postgres --auth=trust -E UTF8 --no-locale" >/dev/null
  fi
  pg_as "$pgbin/pg_ctl -D $dir/data -l $dir/log -w -o '-p 55432 -k $dir -c listen_addresses=127.0.0.1 -c fsync=off' start" >/dev/null
  PG_STOP="$pgbin/pg_ctl -D $dir/data -m fast stop"
  trap 'pg_as "$PG_STOP" >/dev/null 2>&1 || true' EXIT
  export JOBMESH_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
}

pg_answers() {
  if command -v pg_isready >/dev/null; then
    pg_isready -q -h "$1" -p "$2" -U postgres
  else
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
  fi
}

# pg_as runs a command line as the postgres user when we are root (initdb refuses root).
pg_as() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$1"; else sh -c "$1"; fi
}

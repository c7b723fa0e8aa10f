# Sourced by scripts/test.sh. mariadb_ensure exports JOBMESH_TEST_MYSQL_DSN (root, no password, at
# 127.0.0.1:3306): the MariaDB there when it answers, else Debian's mariadb-server, installed
# when missing and started in the background. The XXL-JOB importer's test loads XXL-JOB's schema
# into a database of its own there.

mariadb_ensure() {
  if [ -n "${JOBMESH_TEST_MYSQL_DSN:-}" ]; then return 0; fi
  export JOBMESH_TEST_MYSQL_DSN="root@tcp(127.0.0.1:3306)/"
  if mariadb_answers; then return 0; fi
  echo "no MariaDB at 127.0.0.1:3306; starting one"
  if [ ! -x /usr/sbin/mariadbd ]; then
    mariadb_as_root apt-get update -qq
    mariadb_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null
  fi
  mariadb_as_root mkdir -p /run/mysqld
  mariadb_as_root chown mysql:mysql /run/mysqld
  mariadb_as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  local i
  for i in $(seq 1 60); do
    if mariadb_answers; then return 0; fi
    sleep 1
  done
  echo "MariaDB did not answer on 127.0.0.1:3306 within 60 s" >&2
  return 1
}

# mariadb_answers: the server takes a query as root over TCP.
mariadb_answers() {
  if command -v mariadb >/dev/null; then
    mariadb --protocol=tcp -h 127.0.0.1 -P 3306 -u root -e 'SELECT 1' >/dev/null 2>&1
  else
    (exec 3<>"/dev/tcp/127.0.0.1/3306") 2>/dev/null
  fi
}

mariadb_as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

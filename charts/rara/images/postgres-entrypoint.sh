#!/bin/sh
# First start: initdb with the given user/password/database; then run postgres in the
# foreground (PID 1: SIGINT from `docker stop`/the kubelet is a fast shutdown).
set -eu
: "${POSTGRES_USER:=rara}" "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" "${POSTGRES_DB:=${POSTGRES_USER}}"
if [ ! -s "${PGDATA}/PG_VERSION" ]; then
  pwfile="$(mktemp)"; printf '%s\n' "${POSTGRES_PASSWORD}" > "${pwfile}"
  initdb --username="${POSTGRES_USER}" --pwfile="${pwfile}" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 -D "${PGDATA}" >/dev/null
  rm -f "${pwfile}"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "${PGDATA}/pg_hba.conf"
  echo "host all all ::/0 scram-sha-256" >> "${PGDATA}/pg_hba.conf"
  if [ "${POSTGRES_DB}" != "postgres" ]; then
    postgres --single -D "${PGDATA}" postgres >/dev/null <<SQL
CREATE DATABASE "${POSTGRES_DB}" OWNER "${POSTGRES_USER}";
SQL
  fi
fi
exec postgres -D "${PGDATA}" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"

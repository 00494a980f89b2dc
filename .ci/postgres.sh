#!/usr/bin/env bash
# A throwaway PostgreSQL for the store tests (tests/test_store_postgres.py).
#
#   eval "$(bash .ci/postgres.sh)"     # or: source .ci/postgres.sh
#   bash .ci/postgres.sh stop          # stop the cluster in EVO_PG_DIR (.ci/run does, on exit)
#
# Prints one line on stdout, `export EVO_TEST_POSTGRES_URL=postgresql+psycopg2://postgres@127.0.0.1:PORT/evo_test`;
# everything else goes to stderr. Idempotent: a cluster it started before that is still running is
# reused, one that stopped is started again. Installs the `postgresql` package with apt-get when no
# server binaries are present (Debian/Ubuntu, as root). As root the server runs as the `postgres`
# user (PostgreSQL refuses to run as root); otherwise as the calling user.
#
# Settings: EVO_PG_DIR (cluster and log, default /tmp/evo-ci-postgres), EVO_PG_PORT (first port
# tried, default 5432; the next free one is used if it is taken by something else).
# The cluster trusts every local connection and runs with fsync=off: for tests only.

_evo_postgres() (
    set -euo pipefail
    log() { echo "postgres.sh: $*" >&2; }

    local dir="${EVO_PG_DIR:-/tmp/evo-ci-postgres}"
    local data="$dir/data" db=evo_test

    find_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
    local bin
    bin="$(find_bin)"
    if [[ -z "$bin" || ! -x "$bin/postgres" ]]; then
        if [[ $EUID -ne 0 ]]; then
            log "no PostgreSQL server under /usr/lib/postgresql and not root: install the 'postgresql' package"
            exit 1
        fi
        log "installing postgresql with apt-get"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
        bin="$(find_bin)"
    fi

    # As root, run the server (and initdb) as `postgres`.
    as_owner() { "$@"; }
    if [[ $EUID -eq 0 ]]; then
        if ! id -u postgres >/dev/null 2>&1; then
            log "creating system user postgres"
            useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
        fi
        as_owner() { runuser -u postgres -- "$@"; }
    fi

    listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
    ready() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$1" -U postgres -d postgres; }

    mkdir -p "$dir"
    [[ $EUID -eq 0 ]] && chown postgres:postgres "$dir"

    if [[ ! -s "$data/PG_VERSION" ]]; then
        log "initialising a cluster in $data"
        rm -rf "$data"
        as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >&2 \
            || as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-locale >&2
    fi

    local port
    if as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1 && [[ -s "$dir/port" ]]; then
        port="$(cat "$dir/port")"
        log "already running on 127.0.0.1:$port"
    else
        port="${EVO_PG_PORT:-5432}"
        while listening "$port"; do
            log "port $port is taken; trying $((port + 1))"
            port=$((port + 1))
        done
        echo "$port" >"$dir/port"
        log "starting on 127.0.0.1:$port (log: $dir/server.log)"
        as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c full_page_writes=off" >&2 \
            || { tail -n 20 "$dir/server.log" >&2; exit 1; }
    fi

    local i
    for i in $(seq 1 60); do
        ready "$port" && break
        sleep 0.5
    done
    ready "$port" || { log "server on 127.0.0.1:$port is not ready; see $dir/server.log"; exit 1; }

    if [[ "$("$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc \
            "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]]; then
        log "creating database $db"
        "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db" >&2
    fi

    echo "export EVO_TEST_POSTGRES_URL=postgresql+psycopg2://postgres@127.0.0.1:$port/$db"
)

_evo_postgres_stop() (
    set -euo pipefail
    local dir="${EVO_PG_DIR:-/tmp/evo-ci-postgres}"
    local bin
    bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$bin" && -s "$dir/data/PG_VERSION" ]] || exit 0
    if [[ $EUID -eq 0 ]]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 || exit 0
        runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
    else
        "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 || exit 0
        "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
    fi
    echo "postgres.sh: stopped the server of $dir" >&2
)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: set the variable in the caller's shell, leave no functions or options behind.
    eval "$(_evo_postgres)"
    unset -f _evo_postgres _evo_postgres_stop
elif [[ "${1:-}" == stop ]]; then
    _evo_postgres_stop
else
    _evo_postgres
fi

#!/usr/bin/env bash
# A throwaway PostgreSQL (Debian's package) for the read-model tests.
#   postgres.sh DIR         start a server whose files are in DIR (an empty directory)
#   postgres.sh --stop DIR  stop that server, if one runs, and remove DIR
# Starting prints the SQLAlchemy URL of a fresh database on success; prints nothing and
# exits non-zero when PostgreSQL cannot be had (no apt, no network, ...), so the
# caller can go on without it. Quiet: the server's own output goes to its log file.
set -euo pipefail

newest_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

as_root=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then as_root="sudo -n"; else as_root="none"; fi
fi

bin="$(newest_bin)"
run=()
if [ "$(id -u)" -eq 0 ]; then
    # the server refuses to run as root: it runs as the 'postgres' user the package created
    run=(runuser -u postgres --)
fi

if [ "${1:-}" = "--stop" ]; then
    dir="$2"
    if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
        "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    exit 0
fi

if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    command -v apt-get >/dev/null 2>&1 || exit 1
    [ "$as_root" != "none" ] || exit 1
    $as_root apt-get update -qq >/dev/null 2>&1 || true
    $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
        >/dev/null 2>&1 || exit 1
    bin="$(newest_bin)"
    [ -n "$bin" ] && [ -x "$bin/initdb" ] || exit 1
fi

dir="$1"
if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || exit 1
    chown postgres "$dir"
fi
"${run[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1

for port in $(seq 54329 54349); do
    if "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off" \
        start >/dev/null 2>&1; then
        "${run[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres es_broker_test >/dev/null
        echo "postgresql+psycopg://postgres@127.0.0.1:$port/es_broker_test"
        exit 0
    fi
done
exit 1

# Shared by the scripts: set-up of a fresh Debian/Ubuntu machine (as root or
# as a user with sudo), installation of the extension, and throwaway
# PostgreSQL clusters. Source it; do not run it.

set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_MAJOR=${PG_MAJOR:-15}
PGRX_VERSION=0.18.1
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
PG_CONFIG=$PG_BIN/pg_config
PG_REGRESS=/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/regress/pg_regress
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# The OS user that owns throwaway clusters: PostgreSQL refuses to run as root.
db_user() {
  if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi
}

# Runs a command as db_user, from /tmp (the checkout may be unreadable to it).
as_db_user() {
  if [ "$(id -u)" = 0 ]; then (cd /tmp && runuser -u postgres -- "$@"); else "$@"; fi
}

# Installs what is missing and skips what is there.
ensure_deps() {
  local pkgs="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libclang-dev clang pkg-config libssl-dev build-essential python3"
  local missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    say "installing packages:$missing"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # Debian's postgresql-common creates and starts a system cluster; we
    # never use it (our clusters are throwaway ones on their own sockets).
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
  if ! command -v cargo >/dev/null; then
    echo "Rust (cargo) is required: https://rustup.rs" >&2
    exit 1
  fi
  if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
    if command -v rustup >/dev/null; then
      rustup component add rustfmt clippy
    else
      echo "cargo fmt and cargo clippy are required (rustup component add rustfmt clippy)" >&2
      exit 1
    fi
  fi
  if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION"; then
    say "installing cargo-pgrx $PGRX_VERSION (a few minutes, once)"
    cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
  fi
  if ! grep -qs "pg$PG_MAJOR = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
    cargo pgrx init --pg$PG_MAJOR "$PG_CONFIG" >/dev/null
  fi
}

# Builds (release) and installs the extension into PostgreSQL's directories.
# The files are replaced with `install`, which writes a new file (a new
# inode) rather than rewriting the old one as `cargo pgrx install` does: a
# running server maps gpuindex.so into every process (preloaded, into the
# postmaster too), and a library rewritten in place under them crashes
# them all. Processes keep the old library until the server restarts.
install_extension() {
  say "building and installing the extension"
  local sudo=""
  [ -w "$($PG_CONFIG --pkglibdir)" ] || sudo=sudo
  local pkg="$ROOT/target/release/gpuindex-pg$PG_MAJOR" lib share
  (cd "$ROOT" && cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$pkg" 2>&1 | { grep -vE "^\s+(Compiling|Checking)" || true; })
  lib=$($PG_CONFIG --pkglibdir); share="$($PG_CONFIG --sharedir)/extension"
  test -f "$pkg$lib/gpuindex.so"
  $sudo install -m 755 "$pkg$lib/gpuindex.so" "$lib/"
  # With the companion extension for pgvector's vector (extension/): its
  # control and script beside gpuindex's; CREATE EXTENSION needs pgvector.
  $sudo install -m 644 "$pkg$share"/gpuindex.control "$pkg$share"/gpuindex--*.sql "$ROOT"/extension/gpuindex_pgvector* "$share/"
}

# cluster_start DIR: initdb DIR/data and start a server listening only on
# the Unix socket in DIR (no TCP port, so it never collides with another
# server), with gpuindex preloaded (PRELOAD=0: not). Prints nothing; sets
# PGHOST/PGPORT/PGUSER.
cluster_start() {
  local dir=$1 preload="shared_preload_libraries = 'gpuindex'" checked="gpuindex,generic"
  if [ "${PRELOAD:-1}" = 0 ]; then preload="# no shared_preload_libraries"; checked="generic"; fi
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  as_db_user "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
port = 5432
$preload
# Replay (crash recovery) compares every gpuindex and GenericXLog page
# with the image logged beside the record, masked by the rmgrs' rm_mask.
wal_consistency_checking = '$checked'
fsync = off
max_connections = 50
CONF
  # (RUST_BACKTRACE would put Rust backtraces into error details)
  as_db_user env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
  export PGHOST=$dir PGPORT=5432 PGUSER=postgres
}

cluster_stop() {
  local dir=$1
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_db_user "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
  fi
}

# standby_start PRIMARY DIR: a streaming replica (pg_basebackup -R) of the
# cluster whose socket is in PRIMARY, listening only on the socket in DIR.
standby_start() {
  local primary=$1 dir=$2
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  # A physical slot: the primary keeps the WAL a lagging standby still
  # needs (the tests write a lot, and the crash test restarts the primary).
  as_db_user "$PG_BIN/pg_basebackup" -h "$primary" -p 5432 -U postgres -D "$dir/data" -R -X stream -c fast \
    -C -S gpuindex_standby >"$dir/basebackup.log" 2>&1
  printf "unix_socket_directories = '%s'\nhot_standby = on\n" "$dir" | as_db_user tee -a "$dir/data/postgresql.conf" >/dev/null
  as_db_user env -u RUST_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
}

# Beside the throwaway cluster: a streaming replica of it (PGHOST_STANDBY)
# and a cluster without shared_preload_libraries (PGHOST_NOPRELOAD, and
# GPUINDEX_NOPRELOAD_RESTART to stop it immediately and start it again),
# for the replica and GenericXLog-only test runners.
start_side_clusters() {
  standby_start "$CLUSTER_DIR" "$CLUSTER_DIR/standby"
  (PRELOAD=0 cluster_start "$CLUSTER_DIR/nopreload")
  export PGHOST_STANDBY=$CLUSTER_DIR/standby PGHOST_NOPRELOAD=$CLUSTER_DIR/nopreload
  local ctl="env -u RUST_BACKTRACE $PG_BIN/pg_ctl -D $CLUSTER_DIR/nopreload/data -l $CLUSTER_DIR/nopreload/server.log -w -t 60"
  GPUINDEX_NOPRELOAD_RESTART="$ctl -m immediate stop >/dev/null && $ctl start >/dev/null"
  [ "$(id -u)" = 0 ] && GPUINDEX_NOPRELOAD_RESTART="cd /tmp && runuser -u postgres -- sh -c '$GPUINDEX_NOPRELOAD_RESTART'"
  export GPUINDEX_NOPRELOAD_RESTART GPUINDEX_REQUIRE_STANDBY=1 GPUINDEX_REQUIRE_NOPRELOAD=1
}

# Starts a throwaway cluster in a new directory under /tmp (its path in
# CLUSTER_DIR); on exit it (and any side cluster in it) is stopped and removed.
start_throwaway_cluster() {
  CLUSTER_DIR=$(mktemp -d /tmp/gpuindex-XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  trap 'for d in "$CLUSTER_DIR"/standby "$CLUSTER_DIR"/nopreload "$CLUSTER_DIR"; do cluster_stop "$d"; done; rm -rf "$CLUSTER_DIR"' EXIT
  say "starting a throwaway cluster in $CLUSTER_DIR"
  cluster_start "$CLUSTER_DIR"
}

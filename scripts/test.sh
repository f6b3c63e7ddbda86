#!/usr/bin/env bash
# Every test: sets up what is missing, checks formatting and lints, runs
# the engine tests, compiles the CUDA kernels with NVRTC
# (scripts/check-kernels.py), installs the extension, runs pg_regress
# (sql/, expected/) and the integration tests (tests/) against a throwaway
# cluster, then stops it. Works as root or as a
# user with sudo. GPUINDEX_REQUIRE_GPU=1 makes a missing GPU a failure.
source "$(dirname "$0")/lib.sh"
ensure_deps
cd "$ROOT"

say "formatting and lints (cargo fmt --check, cargo clippy -D warnings)"
cargo fmt --all --check
cargo clippy -q --workspace --all-targets -- -D warnings

say "engine tests (cargo test -p gpuindex-engine)"
log=$(mktemp)
if ! cargo test -p gpuindex-engine --profile bench-build >"$log" 2>&1; then cat "$log"; exit 1; fi
grep -E "^test result|skipping" "$log"; rm -f "$log"

say "CUDA kernels compile with NVRTC (no GPU needed)"
python3 "$ROOT/scripts/check-kernels.py"

install_extension
start_throwaway_cluster

say "pg_regress"
mkdir -p "$CLUSTER_DIR/regress"
tests=$(cd "$ROOT/sql" && ls *.sql | sed 's/\.sql$//' | tr '\n' ' ')
if ! "$PG_REGRESS" --bindir="$PG_BIN" --host="$PGHOST" --port="$PGPORT" --user=postgres \
     --load-extension=gpuindex --inputdir="$ROOT" --outputdir="$CLUSTER_DIR/regress" --dbname=gpuindex_regress $tests; then
  cat "$CLUSTER_DIR/regress/regression.diffs"
  rm -rf "$ROOT/results" && cp -r "$CLUSTER_DIR/regress/results" "$ROOT/results"
  echo "pg_regress failed; its outputs are in results/" >&2
  exit 1
fi

say "starting a streaming replica and a cluster without shared_preload_libraries beside it"
start_side_clusters

say "integration tests (cargo test -p gpuindex-tests) against $PGHOST"
# The crash test restarts the server with this after killing it.
start="env -u RUST_BACKTRACE $PG_BIN/pg_ctl -D $CLUSTER_DIR/data -l $CLUSTER_DIR/server.log -w -t 60 start >/dev/null"
[ "$(id -u)" = 0 ] && start="cd /tmp && runuser -u postgres -- $start"
GPUINDEX_TEST_START="$start" cargo test -q -p gpuindex-tests --profile bench-build -- --test-threads=4
say "all tests passed"

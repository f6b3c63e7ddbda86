#!/usr/bin/env bash
# The demo: sets up what is missing, builds and installs gpuindex, starts a
# throwaway PostgreSQL cluster with gpuindex preloaded, runs demo/demo.sql
# and stops the cluster. Works as root or as a user with sudo.
source "$(dirname "$0")/lib.sh"
ensure_deps
install_extension
start_throwaway_cluster
say "running demo/demo.sql"
"$PG_BIN/psql" -X -d postgres -v ON_ERROR_STOP=1 -f "$ROOT/demo/demo.sql"
say "stopping the cluster"

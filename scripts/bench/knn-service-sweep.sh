#!/bin/bash
# The kNN LATERAL join (10^4 centres, k = 10, 10^7 uniform points,
# gpu_spatial, the GPU service preloaded) under server settings in turn:
# each item of SWEEP is a label, a colon and settings appended to `conf`
# (`name:;gpuindex.epoch_max_queries=8192`). Each restarts the server,
# prewarms, runs the query twice unmeasured and five times timed, then
# once under EXPLAIN (ANALYZE, VERBOSE); PostgreSQL's default parallel
# settings (SERIAL=1: one backend). Prints one line an item (the times,
# the node's index, heap and other time, its chunks, the service's
# requests); with OUT set, each EXPLAIN goes to $OUT/sweep-LABEL.txt.
# ./new.so, if present, is the library. Copy next to a bundle folder
# `pg` made by scripts/gpu-pg-bundle.sh, with bundle-server.sh, and run
# it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./bundle-server.sh
use_new_lib
knn_tables
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
for item in ${SWEEP:-default:}; do
  label=${item%%:*}
  $RT/pg-stop >/dev/null
  PRELOAD=gpuindex PGCONF_EXTRA="$conf${item#*:}" $RT/pg-start >/dev/null || exit 1
  $P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g')" >/dev/null
  out=${OUT:-/tmp}/sweep-$label.txt
  $P > "$out" 2>&1 <<SQL
SET jit = off; $([ -n "${SERIAL:-}" ] && echo 'SET max_parallel_workers_per_gather = 0;')
$K; $K;
\timing on
$K; $K; $K; $K; $K;
\timing off
EXPLAIN (ANALYZE, VERBOSE) $K;
SQL
  echo "$label: $(grep -E '^Time' "$out" | sed -E 's/Time: //; s/ ms.*//' | tr '\n' ' ')|" \
    "$(grep -E 'Workers Launched|Chunks|Index Time|Heap Time|Other Time|GPU Service|Execution Time' "$out" | sed -E 's/^ *//' | tr '\n' ' ')"
done
$RT/pg-stop >/dev/null

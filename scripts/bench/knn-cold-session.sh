#!/bin/bash
# What fresh sessions plan and take for the kNN LATERAL join (10^4
# centres x 10^7 points, k = 10, to rows; SP-GiST beside gpu_spatial; one
# backend): STATEMENTS statements (default 10) in each of SESSIONS fresh
# sessions (default 2), with the GPU service off (the session searches
# its own copy of the index, whose load the planner prices as a ski
# rental: src/join/load.rs) and then on (`auto`). Prints each statement
# as its plan (N: PostgreSQL's nested loop, J: GpuIndexJoin) and its
# EXPLAIN ANALYZE (TIMING OFF) execution time in ms. ./new.so, if present,
# is the library; FRESH=0 reuses the last run's tables. Copy next to a
# bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with
# bundle-server.sh, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./bundle-server.sh
use_new_lib
knn_tables
$P -c "CREATE INDEX IF NOT EXISTS bj_pts_s ON bj_pts USING spgist (p quad_point_ops)" >/dev/null
$P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g'), pg_prewarm('bj_pts_s')" >/dev/null
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
for service in off auto; do
  for s in $(seq ${SESSIONS:-2}); do
    echo -n "service $service, session $s: "
    { echo "SET jit = off; SET max_parallel_workers_per_gather = 0; SET gpuindex.service = $service;"
      for i in $(seq ${STATEMENTS:-10}); do echo "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) $K;"; done; } |
      $P 2>&1 | awk '/GpuIndexJoin/ { p = "J" } /Nested Loop/ { p = "N" } /ERROR/ { print } /Execution Time/ { printf "%s:%s ", p, $3 }'
    echo
  done
done
$RT/pg-stop >/dev/null

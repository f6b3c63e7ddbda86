#!/bin/bash
# The kNN LATERAL join (10^4 centres, k = 10, 10^7 uniform points, to
# rows) as GpuIndexJoin over gpu_spatial and as PostgreSQL's nested loop
# over SP-GiST (quad_point_ops, its fastest plan for it) in turn, on one
# server and one table holding both indexes (each round drops the other
# inside a transaction it rolls back; with SWITCH=guc both stay, and
# gpuindex.enable_join = off gives PostgreSQL's own plan, as a user would
# turn the node off): ROUNDS rounds (default 3) of five
# timed runs after two untimed, one backend (no parallel workers; with
# PARALLEL=1 PostgreSQL's default parallel settings), then one EXPLAIN
# ANALYZE of each. ./new.so, if present, is the library. With
# FRESH=0 it reuses the tables of knn-lateral-ab.sh's last run. Copy next
# to a bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with
# bundle-server.sh, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./bundle-server.sh
use_new_lib
knn_tables
$P <<'SQL'
\timing on
CREATE INDEX IF NOT EXISTS bj_pts_s ON bj_pts USING spgist (p quad_point_ops);
\timing off
SQL
$P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g'), pg_prewarm('bj_pts_s')" >/dev/null
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
run() { # join|builtin [EXPLAIN]
  local only
  if [ "${SWITCH:-}" = guc ]; then
    only="SET gpuindex.enable_join = $([ $1 = join ] && echo on || echo off); BEGIN;"
  else
    only="BEGIN; DROP INDEX $([ $1 = join ] && echo bj_pts_s || echo bj_pts_g);"
  fi
  $P <<SQL 2>&1 | grep -E '^Time|ERROR|Execution|Custom|Index Scan|Index Time|Heap Time|Workers Launched|Chunks|GPU Service|^ *[0-9]+ \|' | sed -E 's/^ *//; s/Time: //; s/ ms.*//' | tr '\n' ' '
SET jit = off; $([ -n "${PARALLEL:-}" ] || echo 'SET max_parallel_workers_per_gather = 0;')
$only
\pset tuples_only on
$K; $K;
\timing on
$K; $K; $K; $K; $K;
\timing off
${2:+EXPLAIN ANALYZE $K;}
ROLLBACK;
SQL
}
for r in $(seq ${ROUNDS:-3}); do
  last=; [ $r = ${ROUNDS:-3} ] && last=1
  echo "round $r GpuIndexJoin (gpu_spatial): $(run join $last)"
  echo "round $r nested loop over SP-GiST: $(run builtin $last)"
done
$RT/pg-stop >/dev/null

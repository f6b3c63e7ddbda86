#!/bin/bash
# GpuIndexJoin's equi-join (10^6 outer x 10^7 inner int8 keys, as
# gpuindex-sql-bench-join) under gpuindex.device = auto and cpu, interleaved in
# one session, with EXPLAIN ANALYZE, and in fresh sessions (their first and
# second run); the nested loop over btree beside (docs/bench/sql-join-equi-interleaved-h200-a164f4d.md).
# Copy next to a bundle folder `pg` made by scripts/gpu-pg-bundle.sh and run it there.
cd "$(dirname "$0")"
conf='shared_buffers=4GB;max_wal_size=16GB'
PRELOAD=gpuindex FRESH=1 PGCONF_EXTRA=$conf pg/server/pg-start >/dev/null || exit 1
source pg/server/pg-env.sh
RT=$(pgb_server_root)
P="$RT/pg-psql -X -q -v ON_ERROR_STOP=1"
s=$(date +%s)
$P <<'SQL'
CREATE EXTENSION gpuindex;
CREATE TABLE bj_inner AS SELECT (i * 2147483647) % 10000000 AS k, i AS v FROM generate_series(0::int8, 9999999) i;
SELECT setseed(0.5);
CREATE TABLE bj_outer AS SELECT i AS id, (random() * 9999999)::int8 AS k FROM generate_series(0::int8, 999999) i;
CREATE INDEX bj_inner_b ON bj_inner (k);
CREATE INDEX bj_inner_g ON bj_inner USING gpu_btree (k);
VACUUM ANALYZE bj_inner; VACUUM ANALYZE bj_outer;
SQL
echo "built in $(( $(date +%s) - s )) s"
J="SELECT count(*), sum(bj_inner.v)::float8 FROM bj_outer JOIN bj_inner ON bj_inner.k = bj_outer.k"
B="SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off;"
E="EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)"
echo "=== nested loop (btree)"
$P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B
\timing on
$J; $J; $J;
ROLLBACK;
SQL
echo "=== one session, alternating (auto, cpu) x 4"
$P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
$B SET enable_nestloop = off;
$J;
\timing on
SET gpuindex.device = auto; $J; SET gpuindex.device = cpu; $J;
SET gpuindex.device = auto; $J; SET gpuindex.device = cpu; $J;
SET gpuindex.device = auto; $J; SET gpuindex.device = cpu; $J;
SET gpuindex.device = auto; $J; SET gpuindex.device = cpu; $J;
SQL
echo "=== one session, EXPLAIN ANALYZE alternating (auto, cpu) x 3"
$P <<SQL 2>&1 | grep -E 'Index Time|Heap Time|Execution Time|GPU Batches' | tr -s ' ' | tr '\n' ' ' | sed 's/Execution Time: \([0-9.]*\) ms/exec \1 |/g'; echo
$B SET enable_nestloop = off;
SET gpuindex.device = auto; $E $J; SET gpuindex.device = cpu; $E $J;
SET gpuindex.device = auto; $E $J; SET gpuindex.device = cpu; $E $J;
SET gpuindex.device = auto; $E $J; SET gpuindex.device = cpu; $E $J;
SQL
echo "=== fresh sessions (first, second run each)"
for r in 1 2 3; do for d in auto cpu; do
  echo -n "$d: "; $P -c "$B SET enable_nestloop = off; SET gpuindex.device = $d;" -c '\timing on' -c "$J" -c "$J" 2>&1 | grep Time | tr '\n' ' '; echo
done; done
$P -c "SELECT epochs, gpu_epochs, requests, queries, declined, fallbacks FROM gpuindex_service_stats()"
$RT/pg-stop >/dev/null

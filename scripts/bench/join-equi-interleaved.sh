#!/bin/bash
# GpuIndexJoin's equi-join (10^6 outer x 10^7 inner int8 keys, as
# gpuindex-sql-bench-join) under gpuindex.device = auto and cpu, interleaved in
# one session, with EXPLAIN ANALYZE, and in fresh sessions (their first and
# second run); the nested loop over btree beside (docs/bench/sql-join-equi-interleaved-h200-a164f4d.md).
# Copy next to a bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with
# equi-tables.sh and bundle-server.sh, and run it there.
cd "$(dirname "$0")"
source ./equi-tables.sh
E="EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)"
nl
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

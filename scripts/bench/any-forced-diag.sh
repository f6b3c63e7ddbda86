#!/bin/bash
# 128K `= ANY` counts over 10^7 int8 keys (equi-tables.sh's bj_inner, a
# gpu_learned index added), each index forced in turn (btree; gpu_btree and
# gpu_learned under auto and cpu), two rounds: five timed runs, two EXPLAIN
# ANALYZE (time to the first row), the backend's minor faults before.
# Copy next to a bundle folder `pg` (scripts/gpu-pg-bundle.sh) with
# equi-tables.sh and bundle-server.sh and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./equi-tables.sh
$P -c "CREATE INDEX bj_inner_l ON bj_inner USING gpu_learned (k)" -c "SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_inner_g'), pg_prewarm('bj_inner_b'), pg_prewarm('bj_inner_l')" > /dev/null
one() { # $1: the index kept, $2: gpuindex.device
$P <<SQL 2>&1 | grep -E 'Time|faults|Index Only|ERROR' | sed 's/  */ /g'
SELECT pg_backend_pid() AS pid \gset
\setenv PID :pid
SET max_parallel_workers_per_gather = 0; SET enable_seqscan = off; SET enable_bitmapscan = off; SET gpuindex.device = $2; SET jit = ${JIT:-on};
BEGIN;
$(for i in bj_inner_b bj_inner_g bj_inner_l; do [ $i != $1 ] && echo "DROP INDEX $i;"; done)
$A;
\timing on
\! echo -n "$1 $2 faults before: "; awk '{print \$10}' /proc/\$PID/stat
$A; $A; $A; $A; $A;
EXPLAIN ANALYZE $A;
EXPLAIN ANALYZE $A;
ROLLBACK;
SQL
}
for r in 1 2; do
  for i in bj_inner_b bj_inner_g bj_inner_l; do for d in auto cpu; do
    [ $i = bj_inner_b ] && [ $d = cpu ] && continue
    one $i $d
  done; done
done
$RT/pg-stop >/dev/null

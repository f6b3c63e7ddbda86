#!/bin/bash
# gpu_learned's batch paths with two builds in turn (as join-equi-ab.sh:
# the bundle's library and ./new.so, or OLD=path as the old one): over
# equi-tables.sh's 10^7 int8 keys with a gpu_learned index, the probe
# function of 128K keys joined back by ctid, a forced `= ANY(128K)` count
# (jit off) and the equi-join over gpu_learned; rounds of four timed runs.
# Copy next to a bundle folder `pg` (scripts/gpu-pg-bundle.sh) with
# equi-tables.sh and bundle-server.sh and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./equi-tables.sh
$P -c "CREATE INDEX bj_inner_l ON bj_inner USING gpu_learned (k)" >/dev/null
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
if [ -n "$OLD" ]; then cp $lib /tmp/new.so; cp "$OLD" /tmp/old.so; else cp $lib /tmp/old.so; cp $here/new.so /tmp/new.so; fi
F="SELECT count(*), sum(t.v) FROM gpu_learned_probe('bj_inner_l', ARRAY(SELECT k FROM keys128)) p JOIN bj_inner t ON t.ctid = p.ctid"
W="SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_outer'), pg_prewarm('bj_inner_l');"
for v in ${ORDER:-old new old new old new}; do
  $RT/pg-stop >/dev/null; cp /tmp/$v.so $lib
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
  $P -c "$W" >/dev/null
  echo -n "$v: "; $P <<SQL 2>&1 | grep -E '^Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; echo
SET max_parallel_workers_per_gather = 0; SET jit = off;
BEGIN; DROP INDEX bj_inner_b; DROP INDEX bj_inner_g;
$F;
\timing on
$F; $F; $F; $F;
\timing off
SET enable_seqscan = off; SET enable_bitmapscan = off;
$A;
\timing on
$A; $A; $A; $A;
\timing off
SET enable_seqscan = on; SET enable_bitmapscan = on; SET enable_hashjoin = off; SET enable_mergejoin = off;
$J;
\timing on
$J; $J; $J; $J;
ROLLBACK;
SQL
done
$RT/pg-stop >/dev/null

#!/bin/bash
# The equi-join (10^6 x 10^7 int8), a 128K `= ANY` over gpu_btree and
# gpu_btree_probe of the 10^6 outer keys (to a count) with two
# builds in turn: the bundle's library (old) and ./new.so (a stripped
# target/release/libgpuindex.so), the server restarted with each (ORDER), the
# nested loop over btree at the start and the end; an EXPLAIN ANALYZE of the
# join under `auto` in each round (its index and heap times). With OLD=path,
# that library is the old build and the bundle's the new one. Copy next to a
# bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with equi-tables.sh,
# bundle-server.sh and new.so (or the OLD library), and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./equi-tables.sh
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
if [ -n "$OLD" ]; then cp $lib /tmp/new.so; cp "$OLD" /tmp/old.so; else cp $lib /tmp/old.so; cp $here/new.so /tmp/new.so; fi
F="SELECT count(*) FROM gpu_btree_probe('bj_inner_g', (SELECT array_agg(k) FROM bj_outer))"
W="SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_outer'), pg_prewarm('bj_inner_g'), pg_prewarm('bj_inner_b');"
nl
for v in ${ORDER:-old new old new old new}; do
  $RT/pg-stop >/dev/null
  if [ $v = old ]; then cp /tmp/old.so $lib; else cp /tmp/new.so $lib; fi
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
  $P -c "$W" >/dev/null
  echo -n "$v: "; $P <<SQL 2>&1 | grep -E 'Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; echo
$B SET enable_nestloop = off; SET enable_seqscan = off; SET enable_bitmapscan = off;
$J;
\timing on
SET gpuindex.device = auto; $J; $J; $J; $J;
SET gpuindex.device = cpu; $J; $J; $J; $J;
SET gpuindex.device = auto; $A; $A; $A;
EXPLAIN (ANALYZE) $J;
$F; $F; $F;
SQL
done
nl
$RT/pg-stop >/dev/null

#!/bin/bash
# The equi-join (10^6 x 10^7 int8), a 128K `= ANY` over gpu_btree and
# gpu_btree_probe of the 10^6 outer keys (to a count) with two
# builds in turn: the bundle's library (old) and ./new.so (a stripped
# target/release/libgpuindex.so), the server restarted with each (ORDER), the
# nested loop over btree at the start and the end. Copy next to a bundle folder
# `pg` made by scripts/gpu-pg-bundle.sh (and new.so) and run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=4GB;max_wal_size=16GB'
PRELOAD=gpuindex FRESH=1 PGCONF_EXTRA=$conf pg/server/pg-start >/dev/null || exit 1
source pg/server/pg-env.sh
RT=$(pgb_server_root); lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
cp $lib /tmp/old.so
P="$RT/pg-psql -X -q -v ON_ERROR_STOP=1"
s=$(date +%s)
$P <<'SQL'
CREATE EXTENSION gpuindex; CREATE EXTENSION pg_prewarm;
CREATE TABLE bj_inner AS SELECT (i * 2147483647) % 10000000 AS k, i AS v FROM generate_series(0::int8, 9999999) i;
SELECT setseed(0.5);
CREATE TABLE bj_outer AS SELECT i AS id, (random() * 9999999)::int8 AS k FROM generate_series(0::int8, 999999) i;
CREATE TABLE keys128 AS SELECT (random() * 9999999)::int8 AS k FROM generate_series(1, 131072);
CREATE INDEX bj_inner_b ON bj_inner (k);
CREATE INDEX bj_inner_g ON bj_inner USING gpu_btree (k);
VACUUM ANALYZE bj_inner; VACUUM ANALYZE bj_outer; VACUUM ANALYZE keys128;
SQL
echo "built in $(( $(date +%s) - s )) s"
J="SELECT count(*), sum(bj_inner.v)::float8 FROM bj_outer JOIN bj_inner ON bj_inner.k = bj_outer.k"
A="SELECT count(*) FROM bj_inner WHERE k = ANY(ARRAY(SELECT k FROM keys128))"
F="SELECT count(*) FROM gpu_btree_probe('bj_inner_g', (SELECT array_agg(k) FROM bj_outer))"
B="SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off;"
W="SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_outer'), pg_prewarm('bj_inner_g'), pg_prewarm('bj_inner_b');"
nl() { echo -n "nested loop (btree): "; $P <<SQL 2>&1 | grep -E 'Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B
\timing on
$J; $J; $J;
ROLLBACK;
SQL
}
nl
for v in ${ORDER:-old new old new old new}; do
  $RT/pg-stop >/dev/null
  if [ $v = old ]; then cp /tmp/old.so $lib; else cp $here/new.so $lib; fi
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
  $P -c "$W" >/dev/null
  echo -n "$v: "; $P <<SQL 2>&1 | grep -E 'Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; echo
$B SET enable_nestloop = off; SET enable_seqscan = off; SET enable_bitmapscan = off;
$J;
\timing on
SET gpuindex.device = auto; $J; $J; $J; $J;
SET gpuindex.device = cpu; $J; $J; $J; $J;
SET gpuindex.device = auto; $A; $A; $A;
$F; $F; $F;
SQL
done
nl
$RT/pg-stop >/dev/null

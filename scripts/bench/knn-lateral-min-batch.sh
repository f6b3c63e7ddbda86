#!/bin/bash
# The kNN LATERAL join (10^4 centres, k = 10, 10^7 uniform points,
# gpu_spatial) under PostgreSQL's default parallel settings with the
# server's gpuindex.gpu_min_batch at 4096 (the default) and 256 in turn:
# the GPU service runs an epoch below it on its CPU, and a parallel
# join's chunks are epochs of a few hundred centres. Huge pages (the
# parallel plan needs them for a small outer table: it reserves them,
# as root). Each round restarts the server, prewarms, runs the query
# twice unmeasured, five times timed and once under EXPLAIN ANALYZE.
# ./new.so is the library. Copy next to a bundle folder `pg` made by
# scripts/gpu-pg-bundle.sh, with bundle-server.sh, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
( echo 2600 > /proc/sys/vm/nr_hugepages )
base='shared_buffers=4GB;max_wal_size=16GB;huge_pages=on'
export conf=$base
source ./bundle-server.sh
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
$RT/pg-stop >/dev/null; cp $here/new.so $lib; PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
$P <<'SQL'
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bj_pts AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS p FROM generate_series(1::int8, 10000000) i;
CREATE TABLE bj_centres AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS c FROM generate_series(1::int8, 10000) i;
CREATE INDEX bj_pts_g ON bj_pts USING gpu_spatial (p);
VACUUM ANALYZE bj_pts; VACUUM ANALYZE bj_centres;
SQL
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
for m in 4096 256 4096 256 4096 256; do
  $RT/pg-stop >/dev/null
  PRELOAD=gpuindex PGCONF_EXTRA="$base;gpuindex.gpu_min_batch=$m" $RT/pg-start >/dev/null || exit 1
  $P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g')" >/dev/null
  echo -n "min_batch $m: "; $P <<SQL 2>&1 | grep -E 'Time|GPU Service' | sed -E 's/^ *//; s/ ms$//; s/^Time: //' | tr '\n' ' '; echo
SET jit = off;
$K; $K;
\timing on
$K; $K; $K; $K; $K;
\timing off
EXPLAIN ANALYZE $K;
SQL
done
$RT/pg-stop >/dev/null

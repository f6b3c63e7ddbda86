#!/bin/bash
# The GPU service's round trip for one gpu_spatial kNN batch (k = 10) over
# 10^7 uniform points, by batch size: for each size, five
# `gpu_spatial_knn` calls through the service (`gpuindex.service = on`)
# and five in the session (`off`, after one untimed call that reads its
# copy of the tree), each printing the statement's time and
# gpuindex_last_batch()'s device and milliseconds. ./new.so, if present,
# is the library. Copy next to a bundle folder `pg` made by
# scripts/gpu-pg-bundle.sh, with bundle-server.sh, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./bundle-server.sh
use_new_lib
knn_tables
$P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g')" >/dev/null
Q="SELECT count(*) FROM gpu_spatial_knn('bj_pts_g', (SELECT a FROM cs), 10)"
LAST="SELECT device, round(millis::numeric, 3) FROM gpuindex_last_batch()"
for n in ${SIZES:-1 64 256 399 400 1041 4096 10000}; do
  for service in on off; do
    echo -n "$n centres, service $service: "
    $P <<SQL 2>&1 | grep -E '^Time|\|' | sed -E 's/^Time: //; s/ ms.*//' | tr '\n' ' '; echo
SET jit = off; SET gpuindex.service = $service;
CREATE TEMP TABLE cs AS SELECT array_agg(point(random() * 1e6, random() * 1e6)) AS a FROM generate_series(1, $n);
\pset tuples_only on
\o /dev/null
$Q;
\o
\timing on
$Q \g /dev/null
\timing off
$LAST;
\timing on
$Q \g /dev/null
$Q \g /dev/null
$Q \g /dev/null
$Q \g /dev/null
\timing off
$LAST;
SQL
  done
done
$RT/pg-stop >/dev/null

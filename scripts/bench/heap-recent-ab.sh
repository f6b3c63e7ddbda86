#!/bin/bash
# A/B of heap fetches through remembered buffers: the bundle's library (new)
# against ./old.so (the build before), the server restarted with each
# (ORDER). The equi-join (10^6 x 10^7 int8, gpu_btree), the kNN LATERAL
# join (10^4 centres, k = 10, 10^7 points, gpu_spatial), and the probe
# function joined back by ctid (TID probes). Each query run once unmeasured,
# then timed four times, in one session per build. Copy next to a bundle
# folder `pg` (scripts/gpu-pg-bundle.sh), equi-tables.sh, bundle-server.sh
# and old.so (a
# stripped target/release/libgpuindex.so of the build to compare) and run
# it there.
cd "$(dirname "$0")"; here=$(pwd)
source ./equi-tables.sh
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
cp $lib /tmp/new.so
s=$(date +%s)
$P <<'SQL'
CREATE TABLE bj_pts AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS p FROM generate_series(1::int8, 10000000) i;
CREATE TABLE bj_centres AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS c FROM generate_series(1::int8, 10000) i;
CREATE INDEX bj_pts_g ON bj_pts USING gpu_spatial (p);
VACUUM ANALYZE bj_pts; VACUUM ANALYZE bj_centres;
SQL
echo "spatial tables built in $(( $(date +%s) - s )) s"
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
F="SELECT count(*), sum(t.v)::float8 FROM gpu_btree_probe('bj_inner_g', (SELECT array_agg(k) FROM bj_outer)) p JOIN bj_inner t ON t.ctid = p.ctid"
W="SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_outer'), pg_prewarm('bj_inner_g'), pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g');"
for v in ${ORDER:-old new new old}; do
  $RT/pg-stop >/dev/null
  if [ $v = old ]; then cp $here/old.so $lib; else cp /tmp/new.so $lib; fi
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
  $P -c "$W" >/dev/null
  for q in J K F; do
    echo -n "$v $q: "; $P <<SQL 2>&1 | grep -E '^Time:|Index Time|Heap Time|Execution Time' | sed -E 's/^ *//; s/ ms.*//; s/^Time: //' | tr '\n' ' '; echo
SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;
${!q};
\timing on
${!q}; ${!q}; ${!q}; ${!q};
\timing off
EXPLAIN (ANALYZE, COSTS OFF) ${!q};
SQL
  done
done
$RT/pg-stop >/dev/null

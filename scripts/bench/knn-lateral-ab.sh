#!/bin/bash
# The kNN LATERAL join (10^4 centres, k = 10, 10^7 uniform points,
# gpu_spatial) with two builds in turn: the bundle's library or ./old.so
# (old) and ./new.so (a stripped target/release/libgpuindex.so), or with
# OLD=path that library as the old one and the bundle's as the new one;
# any other ORDER item NAME is ./NAME.so.
# Each round restarts the server with one build, prewarms, runs the query
# twice unmeasured, five times timed, and once under EXPLAIN ANALYZE; one
# backend, or with PARALLEL=1 PostgreSQL's default parallel settings. An
# ORDER item may add server settings to a build: `new:;gpuindex.gpu_min_batch=256`
# (the text after the colon is appended to `conf`). With FRESH=0 it
# reuses the last run's tables. Copy next to a bundle folder
# `pg` made by scripts/gpu-pg-bundle.sh, with bundle-server.sh, and run it
# there.
cd "$(dirname "$0")"; here=$(pwd)
source ./bundle-server.sh
knn_tables
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
if [ -n "$OLD" ]; then cp $lib /tmp/new.so; cp "$OLD" /tmp/old.so; else cp $lib /tmp/old.so; [ -f $here/old.so ] && cp $here/old.so /tmp/old.so; cp $here/new.so /tmp/new.so; fi
for v in ${ORDER:-}; do v=${v%%:*}; case $v in old|new) ;; *) cp "$here/$v.so" /tmp/$v.so ;; esac; done
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
for v in ${ORDER:-old new old new old new}; do
  extra=; [[ $v == *:* ]] && extra=${v#*:}
  $RT/pg-stop >/dev/null; cp /tmp/${v%%:*}.so $lib
  PRELOAD=gpuindex PGCONF_EXTRA="$conf$extra" $RT/pg-start >/dev/null || exit 1
  $P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g')" >/dev/null
  echo -n "$v: "; $P <<SQL 2>&1 | grep -E 'Time|GPU Service' | sed -E 's/^ *//; s/ ms.*//; s/^Time: //' | tr '\n' ' '; echo
$([ -n "${PARALLEL:-}" ] || echo 'SET max_parallel_workers_per_gather = 0;')
$K; $K;
\timing on
$K; $K; $K; $K; $K;
\timing off
EXPLAIN ANALYZE $K;
SQL
done
$RT/pg-stop >/dev/null

#!/bin/bash
# perf profile of the kNN LATERAL join (knn_tables: 10^4 centres x 10^7
# points, k = 10) in one backend on the GPU host, huge pages on: EXPLAIN
# ANALYZE twice, the time of twenty statements, then `perf record -a`
# over twenty (OUT: knn-plan.txt, knn-sym.txt, knn-tid.txt and
# knn-profile.txz, the raw data for `perf report` or perf-timeline.py
# here, with the library at the path the host had). With SPGIST=1 the
# same for PostgreSQL's plan over SP-GiST (gpuindex.enable_join = off).
# ./perf.tar.xz from perf-pack.sh; LIB (default new) names ./LIB.so.
# Copy next to a bundle folder `pg` (scripts/gpu-pg-bundle.sh) with
# bundle-server.sh and run it there.
cd "$(dirname "$0")"; here=$(pwd)
tar xJf perf.tar.xz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfpkg/lib /tmp/perfpkg/perf"
echo 2600 > /proc/sys/vm/nr_hugepages
conf='shared_buffers=4GB;max_wal_size=16GB;huge_pages=on'
source ./bundle-server.sh
$RT/pg-stop >/dev/null; cp "$here/${LIB:-new}.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
PRELOAD=gpuindex PGCONF_EXTRA="$conf" $RT/pg-start >/dev/null || exit 1
knn_tables
K="SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s"
whats=knn
if [ -n "${SPGIST:-}" ]; then
  $P -c "CREATE INDEX IF NOT EXISTS bj_pts_s ON bj_pts USING spgist (p quad_point_ops)"
  whats="knn spgist"
fi
$P -c "SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_g')" >/dev/null
# loop SETTINGS N: N statements of the join in one session.
loop() {
  { echo "SET jit = off; SET max_parallel_workers_per_gather = 0; $1"; echo '\o /dev/null'
    for i in $(seq $2); do echo "$K;"; done; } | $P
}
for what in $whats; do
  s=''; [ $what = spgist ] && s='SET gpuindex.enable_join = off;'
  loop "$s" 3
  for i in 1 2; do echo "SET jit = off; SET max_parallel_workers_per_gather = 0; $s EXPLAIN (ANALYZE, VERBOSE) $K;" | $P; done > $OUT/$what-plan.txt 2>&1
  /usr/bin/time -f "20 statements: %e s" bash -c "$(declare -f loop); P='$P'; K='$K'; loop '$s' 20" 2>> $OUT/$what-plan.txt
  $PERF record -F 4999 -a -o /tmp/$what.data -- bash -c "$(declare -f loop); P='$P'; K='$K'; loop '$s' 20" > /dev/null 2>> $OUT/perf-err.txt
  $PERF report -i /tmp/$what.data -v --sort comm,dso,sym --no-children --percent-limit 0.2 2>/dev/null | grep -v '^$' | head -150 > $OUT/$what-sym.txt
  $PERF report -i /tmp/$what.data --sort comm,pid --no-children --percent-limit 0.2 2>/dev/null | grep -v '^$' | head -80 > $OUT/$what-tid.txt
done
tar cJf $OUT/knn-profile.txz -C /tmp $(for w in $whats; do echo $w.data; done)
$RT/pg-stop >/dev/null

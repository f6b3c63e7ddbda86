#!/bin/bash
# After fused-keysets-ab.sh, next to it, on its server and tables
# (FRESH=0): library ./$LIB.so (new), the two sums of the fused call with
# 0, 2, 4 and 8 workers a Gather (`max_parallel_workers_per_gather`), then
# warm EXPLAIN (ANALYZE, VERBOSE) of the Zipf sum with 0, 2 and 8 workers.
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'
FRESH=0 source ./bundle-server.sh
$RT/pg-stop >/dev/null; cp "$here/${LIB:-new}.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
keys() { echo "SELECT a AS arr FROM probes WHERE t = '$1' \\gset"; }
for w in 0 2 4 8; do
  for t in tu tz; do
    echo "-- ${LIB:-new} workers $w $t sum: $(timed "$(keys $t)"$'\n'"SET max_parallel_workers_per_gather = $w;" "SELECT sum(t.payload) FROM gpu_btree_probe('${t}_g', :'arr'::int8[]) p JOIN $t t ON t.ctid = p.ctid")"
  done
done
for w in 0 2 8; do
  zipf_sum_plan "SET max_parallel_workers_per_gather = $w;"
done
$RT/pg-stop >/dev/null

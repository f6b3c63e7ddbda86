#!/bin/bash
# perf profiles of the fused Zipf sum (fused-keysets-ab.sh's tables) on
# the GPU host, in one backend and with two workers: EXPLAIN ANALYZE
# twice, the time of twenty statements, then `perf record -a` over ten
# (OUT: *-plan.txt, *-sym.txt, *-tid.txt and profiles.txz, the raw data
# for `perf report` or perf-timeline.py here, with the library at the
# path the host had). ./perf.tar.xz from perf-pack.sh; LIB (default new)
# names ./LIB.so. Copy next to a bundle folder `pg`
# (scripts/gpu-pg-bundle.sh) with bundle-server.sh and run it there.
cd "$(dirname "$0")"; here=$(pwd)
tar xJf perf.tar.xz -C /tmp
PERF="env LD_LIBRARY_PATH=/tmp/perfpkg/lib /tmp/perfpkg/perf"
conf='shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min;huge_pages=on'
source ./bundle-server.sh
$RT/pg-stop >/dev/null; cp "$here/${LIB:-new}.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
PRELOAD=gpuindex PGCONF_EXTRA="$conf" $RT/pg-start >/dev/null || exit 1
keyset_tables
# loop SETTINGS N: N statements of the sum in one session.
loop() {
  { echo "SELECT a AS arr FROM probes WHERE t = 'tz' \\gset"; echo "SET jit = off; $1"; echo '\o /dev/null'
    for i in $(seq $2); do echo "SELECT sum(t.payload) FROM gpu_btree_probe('tz_g', :'arr'::int8[]) p JOIN tz t ON t.ctid = p.ctid;"; done; } | $P
}
loop '' 3
for what in serial parallel; do
  s=''; [ $what = serial ] && s='SET max_parallel_workers_per_gather = 0;'
  { zipf_sum_plan "$s"; zipf_sum_plan "$s"; } > $OUT/$what-plan.txt 2>&1
  /usr/bin/time -f "20 statements: %e s" bash -c "$(declare -f loop); P='$P'; loop '$s' 20" 2>> $OUT/$what-plan.txt
  $PERF record -F 1999 -a -o /tmp/$what.data -- bash -c "$(declare -f loop); P='$P'; loop '$s' 10" > /dev/null 2>> $OUT/perf-err.txt
  $PERF report -i /tmp/$what.data -v --sort comm,dso,sym --no-children --percent-limit 0.3 2>/dev/null | grep -v '^$' | head -120 > $OUT/$what-sym.txt
  $PERF report -i /tmp/$what.data --sort comm,pid --no-children --percent-limit 0.2 2>/dev/null | grep -v '^$' | head -80 > $OUT/$what-tid.txt
done
tar cJf $OUT/profiles.txz -C /tmp serial.data parallel.data
$RT/pg-stop >/dev/null

#!/bin/bash
# A short A/B: fused-keysets-ab.sh's Zipf set only (a fresh draw), the
# fused call's sum(payload) joined back by ctid at default settings for
# ./new.so and ./mid.so in turn, three rounds, no btree; then a warm
# EXPLAIN ANALYZE of it with new. Copy next to a bundle folder `pg`
# (scripts/gpu-pg-bundle.sh) with bundle-server.sh and the two libraries.
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'
source ./bundle-server.sh
N=10000000; M=131072
use_lib() {
  $RT/pg-stop >/dev/null; cp "$here/$1.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
}
use_lib mid
$P <<SQL
CREATE EXTENSION gpuindex;
CREATE TABLE tz (k int8, payload int8);
INSERT INTO tz SELECT (least(floor(pow(random(), -5)), 1000000)::int8 * 2654435761) % 4294967296, i FROM generate_series(0, $N - 1) i;
CREATE INDEX tz_g ON tz USING gpu_btree (k);
VACUUM ANALYZE tz;
SELECT setseed(0.25);
CREATE TABLE probes AS SELECT 'tz' AS t, array_agg(k)::text a FROM (SELECT k FROM (SELECT DISTINCT k FROM tz) d ORDER BY random() LIMIT $M) g(k);
SQL
keys="SELECT a AS arr FROM probes WHERE t = 'tz' \\gset"
q="SELECT sum(t.payload) FROM gpu_btree_probe('tz_g', :'arr'::int8[]) p JOIN tz t ON t.ctid = p.ctid"
for round in 1 2 3; do
  for lib in new mid; do
    use_lib $lib
    echo "-- round $round $lib tz sum: $(timed "$keys" "$q")"
  done
done
$P <<SQL | grep -E "Time|actual|Worker|Pieces"
$keys
SET jit = off;
\o /dev/null
$q;
\o
EXPLAIN (ANALYZE, COSTS OFF) $q;
SQL
$RT/pg-stop >/dev/null

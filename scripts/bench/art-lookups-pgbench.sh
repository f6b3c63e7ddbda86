#!/bin/bash
# Single lookups as a client sends them (pgbench, prepared, one client,
# a transaction each), gpu_art against btree and hash in turn: three
# copies of one table of 10^7 uuids (md5 of 1..10^7), one index each; a
# lookup of md5(r) for a random r, ROUNDS rounds of SECS seconds per
# index. Prints each run's mean latency (us) and tps. Copy next to a
# bundle folder `pg` (scripts/gpu-pg-bundle.sh) with bundle-server.sh and
# run it there.
cd "$(dirname "$0")"
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
source ./bundle-server.sh
rows=${ROWS:-10000000}
$P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE l_art (k uuid, payload int);
INSERT INTO l_art SELECT md5(g::text)::uuid, g FROM generate_series(1, $rows) g;
CREATE TABLE l_btree AS SELECT * FROM l_art;
CREATE TABLE l_hash AS SELECT * FROM l_art;
SET maintenance_work_mem = '4GB';
CREATE INDEX ON l_art USING gpu_art (k);
CREATE INDEX ON l_btree (k);
CREATE INDEX ON l_hash USING hash (k);
VACUUM ANALYZE l_art; VACUUM ANALYZE l_btree; VACUUM ANALYZE l_hash;
SQL
for t in art btree hash; do
  $P -c "SELECT pg_prewarm('l_$t'), pg_prewarm(indexrelid) FROM pg_index WHERE indrelid = 'l_$t'::regclass" >/dev/null
  printf '\\set r random(1, %d)\nSELECT payload FROM l_%s WHERE k = md5(:r::text)::uuid;\n' $rows $t > /tmp/lookup-$t.sql
done
# The bundle's wrapper (its libraries on the path).
bench=$RT/bin/pgbench
for r in $(seq ${ROUNDS:-3}); do
  for t in art btree hash; do
    out=$($bench -n -M prepared -c 1 -T ${SECS:-10} -f /tmp/lookup-$t.sql 2>&1)
    lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    [ -n "$lat" ] || { echo "$out" | tail -3; exit 1; }
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
    echo "round $r $t: latency $(awk "BEGIN {printf \"%.2f\", $lat * 1000}") us, tps $tps"
  done
done
$RT/pg-stop >/dev/null

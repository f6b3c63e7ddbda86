#!/bin/bash
# Two libraries (./old.so, ./new.so) in turn, ROUNDS (4) rounds, on the
# parallel fused sum `sum(payload)` of `gpu_btree_probe(index, keys) p JOIN
# t ON t.ctid = p.ctid` over fused-keysets-ab.sh's tables (tu: uniform
# keys, tz: Zipf keys; 10^7 rows, 131,072 keys): tz and tu at default
# settings (two workers), tz with four. Each query once unmeasured, then
# five times (ms), in a fresh session after the server restarted on the
# library. Last, PostgreSQL's parallel hash join of tz's sum (btree kept,
# gpu_btree dropped in a rolled-back transaction). Copy next to a bundle
# folder `pg` (scripts/gpu-pg-bundle.sh) with bundle-server.sh, old.so and
# new.so, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min;huge_pages=on'
source ./bundle-server.sh
restart() { $RT/pg-stop >/dev/null; cp "$here/$1.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so; PRELOAD=gpuindex PGCONF_EXTRA="$conf" $RT/pg-start >/dev/null || exit 1; }
restart old
keyset_tables
# q TABLE SETTINGS: the five times of the fused sum over TABLE.
q() {
  $P <<SQL 2>&1 | grep -E '^Time' | sed 's/Time: //; s/ ms//' | tr '\n' ' '
SELECT a AS arr FROM probes WHERE t = '$1' \gset
SET jit = off; $2
\o /dev/null
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
\timing on
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;
SQL
  echo
}
for round in $(seq ${ROUNDS:-4}); do
for v in old new; do
  restart $v
  echo "-- $round $v tz parallel: $(q tz '')"
  echo "-- $round $v tu parallel: $(q tu '')"
  echo "-- $round $v tz 4 workers: $(q tz 'SET max_parallel_workers_per_gather = 4;')"
done
done
t=tz
echo "-- hash $t: $($P <<SQL 2>&1 | grep -E '^Time' | sed 's/Time: //; s/ ms//' | tr '\n' ' '
SELECT a AS arr FROM probes WHERE t = '$t' \gset
SET jit = off; SET gpuindex.enable_join = off; SET enable_nestloop = off; SET enable_mergejoin = off;
BEGIN; DROP INDEX ${t}_g;
\o /dev/null
SELECT sum(t.payload) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k;
\timing on
SELECT sum(t.payload) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k;
SELECT sum(t.payload) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k;
SELECT sum(t.payload) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k;
\timing off
ROLLBACK;
SQL
)"
$RT/pg-stop >/dev/null

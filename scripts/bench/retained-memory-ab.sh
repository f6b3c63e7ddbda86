#!/bin/bash
# gpuindex.retained_memory at its default (256MB) against 0: two sessions, runs
# interleaved, the equi-join (10^6 x 10^7 int8) under auto and cpu and a 128K
# `= ANY` count over gpu_btree; the nested loop and btree's `= ANY` beside
# (docs/notes.md, "Batch buffers kept between batches"). Copy next to a bundle
# folder `pg` made by scripts/gpu-pg-bundle.sh and run it there.
cd "$(dirname "$0")"
conf='shared_buffers=4GB;max_wal_size=16GB'
PRELOAD=gpuindex FRESH=1 PGCONF_EXTRA=$conf pg/server/pg-start >/dev/null || exit 1
source pg/server/pg-env.sh
RT=$(pgb_server_root)
P="$RT/pg-psql -X -q -v ON_ERROR_STOP=1"
s=$(date +%s)
$P <<'SQL'
CREATE EXTENSION gpuindex;
CREATE TABLE bj_inner AS SELECT (i * 2147483647) % 10000000 AS k, i AS v FROM generate_series(0::int8, 9999999) i;
SELECT setseed(0.5);
CREATE TABLE bj_outer AS SELECT i AS id, (random() * 9999999)::int8 AS k FROM generate_series(0::int8, 999999) i;
CREATE TABLE keys128 AS SELECT (random() * 9999999)::int8 AS k FROM generate_series(1, 131072);
CREATE INDEX bj_inner_b ON bj_inner (k);
CREATE INDEX bj_inner_g ON bj_inner USING gpu_btree (k);
VACUUM ANALYZE bj_inner; VACUUM ANALYZE bj_outer; VACUUM ANALYZE keys128;
SQL
echo "built in $(( $(date +%s) - s )) s"
J="SELECT count(*), sum(bj_inner.v)::float8 FROM bj_outer JOIN bj_inner ON bj_inner.k = bj_outer.k"
A="SELECT count(*) FROM bj_inner WHERE k = ANY(ARRAY(SELECT k FROM keys128))"
B="SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off;"
echo "=== nested loop (btree)"
$P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B
\timing on
$J; $J; $J;
ROLLBACK;
SQL
echo "=== = ANY(128K) count, btree (forced index scan)"
$P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B SET enable_seqscan = off; SET enable_bitmapscan = off;
\timing on
$A; $A; $A; $A;
ROLLBACK;
SQL
coproc K { $P -A -t 2>&1; }
coproc N { $P -A -t 2>&1; }
init="$B SET enable_nestloop = off; SET enable_seqscan = off; SET enable_bitmapscan = off;"
echo "$init SET gpuindex.retained_memory = '256MB';" >&${K[1]}
echo "$init SET gpuindex.retained_memory = 0;" >&${N[1]}
run() { # fd_in fd_out device sql
  local t0 t1 r; echo "SET gpuindex.device = $3; $4;" >&$1; t0=$(date +%s%N); read -u $2 r; t1=$(date +%s%N)
  echo -n "$(( (t1-t0)/1000000 )) "
}
for q in J A; do
  sql=${!q}
  echo "=== $q: warm-up"; run ${K[1]} ${K[0]} auto "$sql"; run ${N[1]} ${N[0]} auto "$sql"; echo
  for d in auto cpu; do
    kk=""; nn=""
    for r in 1 2 3 4 5; do
      kk="$kk $(run ${K[1]} ${K[0]} $d "$sql")"; nn="$nn $(run ${N[1]} ${N[0]} $d "$sql")"
    done
    echo "$q $d kept (ms):$kk"; echo "$q $d none (ms):$nn"
  done
done
echo '\q' >&${K[1]}; echo '\q' >&${N[1]}; wait
$RT/pg-stop >/dev/null

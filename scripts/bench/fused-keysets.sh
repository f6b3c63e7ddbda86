#!/bin/bash
# A batch function's call joined back by ctid, its keys a constant the
# planner counts (`gpuindex_batch_rows`), on two key sets of N (10^7)
# int8 rows in one run, so that their ratios compare: "uniform" (a
# permutation of 0..N-1; the probes M random keys, ~9% misses) and "zipf"
# (Zipf-like ranks, s = 1.2 over 10^6 ranks, the first held by ~13% of
# the rows; the probes M distinct stored keys). gpu_btree and btree on k,
# VACUUM ANALYZE. Per set, `count(*)` (index-only) and `sum(payload)`,
# their plans with EXPLAIN ANALYZE, then ROUNDS (3) rounds in turn of:
#   fused: `gpu_btree_probe('t_g', keys) p JOIN t ON t.ctid = p.ctid` at
#     PostgreSQL's default settings;
#   btree: the join as written, `unnest(keys) u(k) JOIN t ON t.k = u.k`,
#     gpu_btree dropped in a rolled-back transaction, the planner's choice
#     at default settings;
#   btree nested loop, one backend: forced (as fused-call-ab.sh).
# M (131,072) keys. Copy next to a bundle folder `pg` made by
# scripts/gpu-pg-bundle.sh, with bundle-server.sh (and new.so, new.sql to
# run that library), and run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf=${CONF:-'shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'}
source ./bundle-server.sh
use_new_lib
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=${N:-10000000}
M=${M:-131072}
$P -c "CREATE EXTENSION gpuindex"
for set in ${SETS:-uniform zipf}; do
  t0=$(date +%s)
  if [ "$set" = zipf ]; then
    key="(least(floor(pow(random(), -5)), 1000000)::int8 * 2654435761) % 4294967296"
    probes="SELECT k FROM (SELECT DISTINCT k FROM t) d ORDER BY random() LIMIT $M"
  else
    key="(i * 2654435761) % $N"
    probes="SELECT (random() * $N * 1.09)::int8 FROM generate_series(1, $M)"
  fi
  $P <<SQL
DROP TABLE IF EXISTS t, probes;
CREATE TABLE t (k int8, payload int8);
INSERT INTO t SELECT $key, i FROM generate_series(0, $N - 1) i;
CREATE INDEX t_g ON t USING gpu_btree (k); CREATE INDEX t_b ON t (k);
VACUUM ANALYZE t;
SELECT setseed(0.25);
CREATE TABLE probes AS SELECT array_agg(k)::text a FROM ($probes) g(k);
SQL
  echo "== $set: built in $(( $(date +%s) - t0 )) s"
  # (\gset ends its line.)
  keys="SELECT a AS arr FROM probes \\gset"$'\n'
  nogpu="SET gpuindex.enable_join = off; BEGIN; DROP INDEX t_g;"
  forced="SET max_parallel_workers_per_gather = 0; $nogpu SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;"
  for what in "count(*)" "sum(t.payload)"; do
    F="SELECT $what FROM gpu_btree_probe('t_g', :'arr'::int8[]) p JOIN t ON t.ctid = p.ctid"
    J="SELECT $what FROM unnest(:'arr'::int8[]) u(k) JOIN t ON t.k = u.k"
    echo "-- $set $what: plans"
    for q in "$keys|$F" "$keys $nogpu|$J"; do
      $P <<SQL | grep -E "Gather|Workers|Join|Scan|Nested|Hash|Aggregate|rows=|Time|Matches"
${q%%|*}
EXPLAIN (COSTS OFF) ${q#*|};
EXPLAIN (ANALYZE, COSTS OFF) ${q#*|};
SQL
    done
    for round in $(seq ${ROUNDS:-3}); do
      echo "-- $set $what round $round fused: $(timed "$keys" "$F")"
      echo "-- $set $what round $round btree: $(timed "$keys $nogpu" "$J" "ROLLBACK;")"
      echo "-- $set $what round $round btree nested loop, one backend: $(timed "$keys $forced" "$J" "ROLLBACK;")"
    done
  done
done
$RT/pg-stop >/dev/null

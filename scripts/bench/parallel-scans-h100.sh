#!/usr/bin/env bash
# Parallel scans over btree and gpu_btree, interleaved: 10^7 unique keys
# (docs/bench/sql-gpu_btree-parallel-1e7-h100.md). Copy into the bundle
# that scripts/gpu-pg-bundle.sh makes (OUTDIR) and run it there; OUT names
# a folder for the server's log. Prints EXPLAIN ANALYZE (round 1) and the
# times of each statement's two runs per contender and round.
cd "$(dirname "$0")"
server/pg-stop >/dev/null 2>&1; pkill -9 -f postgres; sleep 1
PRELOAD=gpuindex FRESH=1 PGCONF_EXTRA='max_worker_processes=16;max_parallel_workers=16' server/pg-start > $OUT/start.log 2>&1 || { tail -20 $OUT/start.log; exit 1; }
source server/pg-env.sh
P="server/pg-psql -X -q -v ON_ERROR_STOP=1"
$P -c "CREATE EXTENSION IF NOT EXISTS gpuindex" -c "CREATE EXTENSION IF NOT EXISTS pg_prewarm" \
   -c "CREATE TABLE t AS SELECT (i * 2654435761) % 10000000 AS k, i AS payload FROM generate_series(0, 9999999) i" \
   -c "CREATE INDEX t_b ON t USING btree (k)" -c "CREATE INDEX t_g ON t USING gpu_btree (k)" -c "VACUUM ANALYZE t" \
   -c "CREATE TABLE pr AS SELECT array_agg((i::int8 * 7919) % 10000000) a FROM generate_series(1, 128000) i" \
   -c "SELECT pg_prewarm('t'), pg_prewarm('t_b'), pg_prewarm('t_g')" || exit 1
cat > /tmp/q.sql <<'SQL'
\set ON_ERROR_STOP 1
SELECT a::text AS arr FROM pr \gset
SET enable_seqscan = off; SET enable_bitmapscan = off; SET max_parallel_workers_per_gather = 4; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET cpu_operator_cost = 0;
SET enable_hashjoin = off; SET enable_nestloop = off; SET gpuindex.enable_join = off;
BEGIN;
DROP INDEX :other;
\if :explain
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) SELECT sum(payload) FROM t WHERE k BETWEEN 0 AND 3000000;
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) SELECT sum(p) FROM (SELECT payload p FROM t WHERE k BETWEEN 0 AND 3000000 ORDER BY k DESC) s;
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF) SELECT sum(payload) FROM t WHERE k = ANY(:'arr'::int8[]);
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT count(*) FROM unnest(:'arr'::int8[]) u(k) JOIN t ON t.k = u.k;
\endif
\timing on
\echo fwd
SELECT sum(payload) FROM t WHERE k BETWEEN 0 AND 3000000;
SELECT sum(payload) FROM t WHERE k BETWEEN 0 AND 3000000;
\echo bwd
SELECT sum(p) FROM (SELECT payload p FROM t WHERE k BETWEEN 0 AND 3000000 ORDER BY k DESC) s;
SELECT sum(p) FROM (SELECT payload p FROM t WHERE k BETWEEN 0 AND 3000000 ORDER BY k DESC) s;
\echo any
SELECT sum(payload) FROM t WHERE k = ANY(:'arr'::int8[]);
SELECT sum(payload) FROM t WHERE k = ANY(:'arr'::int8[]);
\echo merge
SELECT count(*) FROM unnest(:'arr'::int8[]) u(k) JOIN t ON t.k = u.k;
SELECT count(*) FROM unnest(:'arr'::int8[]) u(k) JOIN t ON t.k = u.k;
ROLLBACK;
SQL
for round in 1 2 3; do
  order="t_b t_g"; [ $((round % 2)) = 0 ] && order="t_g t_b"
  for idx in $order; do
    other=$([ $idx = t_b ] && echo t_g || echo t_b)
    explain=$([ $round = 1 ] && echo true || echo false)
    echo "### round $round index $idx"
    $P -v other=$other -v explain=$explain -f /tmp/q.sql 2>&1 | grep -v "^ *[0-9-]* *$\|^-*$\|sum\|count" | grep -v "Index Cond\|Filter:" | cut -c1-200
  done
done
server/pg-stop >/dev/null 2>&1

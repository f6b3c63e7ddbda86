# Sourced by the bench scripts over the equi-join's tables (join-equi-ab.sh,
# join-equi-interleaved.sh, retained-memory-ab.sh, heap-recent-ab.sh,
# learned-probe-ab.sh, any-forced-diag.sh), run from the folder that holds
# the bundle folder `pg` (scripts/gpu-pg-bundle.sh), bundle-server.sh and
# these scripts: starts a fresh server (bundle-server.sh), builds the tables of gpuindex-sql-bench-join's
# equi-join (10^7 inner rows of unique int8 keys in random heap order with
# btree and gpu_btree, 10^6 outer rows, 131,072 keys for `= ANY`), and sets
# conf, RT, P (psql), the queries J (the join), A (a 128K `= ANY` count), B (one
# backend, nested loops only) and nl (the nested loop over btree, three runs).
source ./bundle-server.sh
s=$(date +%s)
$P <<'SQL'
CREATE EXTENSION gpuindex; CREATE EXTENSION pg_prewarm;
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
nl() { echo -n "nested loop (btree): "; $P <<SQL 2>&1 | grep -E 'Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B
\timing on
$J; $J; $J;
ROLLBACK;
SQL
}

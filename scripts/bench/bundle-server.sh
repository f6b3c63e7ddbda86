# Sourced by the bench scripts that run next to a bundle folder `pg`
# (scripts/gpu-pg-bundle.sh): starts a fresh server (FRESH=0: on the
# last one's data) with gpuindex preloaded and the settings in `conf`
# (set before sourcing; default
# shared_buffers=4GB;max_wal_size=16GB), and sets RT (the server's root)
# and P (psql on it, stopping at the first error).
conf=${conf:-'shared_buffers=4GB;max_wal_size=16GB'}
PRELOAD=gpuindex FRESH=${FRESH:-1} PGCONF_EXTRA=$conf pg/server/pg-start >/dev/null || exit 1
source pg/server/pg-env.sh
RT=$(pgb_server_root)
P="$RT/pg-psql -X -q -v ON_ERROR_STOP=1"
# timed SETUP QUERY [AFTER]: in one session, SETUP (SQL), QUERY once
# unmeasured and three times timed, then AFTER; prints the three times
# (or the ERROR) on one line.
timed() {
  $P <<SQL 2>&1 | grep -E 'Time|ERROR' | tr '\n' ' '; echo
SET jit = off; $1
\o /dev/null
$2;
\o
\timing on
$2; $2; $2;
\timing off
${3:-}
SQL
}
# knn_tables: the kNN LATERAL benches' tables (10^7 uniform points with a
# gpu_spatial index, 10^4 centres), made where missing (FRESH=0 keeps them).
knn_tables() {
  $P <<'SQL'
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
SELECT to_regclass('bj_pts') IS NULL AS missing \gset
\if :missing
CREATE TABLE bj_pts AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS p FROM generate_series(1::int8, 10000000) i;
CREATE TABLE bj_centres AS SELECT i AS id, point(random() * 1e6, random() * 1e6) AS c FROM generate_series(1::int8, 10000) i;
CREATE INDEX bj_pts_g ON bj_pts USING gpu_spatial (p);
VACUUM ANALYZE bj_pts; VACUUM ANALYZE bj_centres;
\endif
SQL
}
# use_new_lib: restarts the server on ./new.so (in the calling script's
# folder, $here), where there is one, with ./new.sql as the extension's
# script where there is one (a library whose SQL changed).
use_new_lib() {
  [ -f "$here/new.so" ] || return 0
  $RT/pg-stop >/dev/null; cp "$here/new.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
  [ -f "$here/new.sql" ] && cp "$here/new.sql" $RT/usr/share/postgresql/15/extension/gpuindex--0.1.0.sql
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
}
# zipf_sum_plan [SQL]: after fused-keysets-ab.sh's tables, a warm
# EXPLAIN (ANALYZE, VERBOSE) of the fused Zipf sum, SQL run first: its
# times, each participant's, its pieces and matches.
zipf_sum_plan() {
  $P <<SQL | grep -E "Time|actual|Worker|Chunks|Pieces|Matches"
SELECT a AS arr FROM probes WHERE t = 'tz' \gset
SET jit = off; ${1:-}
\o /dev/null
SELECT sum(t.payload) FROM gpu_btree_probe('tz_g', :'arr'::int8[]) p JOIN tz t ON t.ctid = p.ctid;
\o
EXPLAIN (ANALYZE, VERBOSE, COSTS OFF) SELECT sum(t.payload) FROM gpu_btree_probe('tz_g', :'arr'::int8[]) p JOIN tz t ON t.ctid = p.ctid;
SQL
}
# keyset_tables [SQL]: fused-keysets-ab.sh's two key sets, N (10^7) rows
# each, gpu_btree and btree on k (SQL run after them: more indexes),
# VACUUM ANALYZE; then `probes`, M (131,072) keys of each: tu (uniform: a
# permutation of 0..N-1, random keys, ~9% misses) and tz (Zipf-like
# ranks, s = 1.2 over 10^6 ranks, the first held by ~13% of the rows;
# drawn afresh each time; M distinct stored keys).
keyset_tables() {
  local N=${N:-10000000} M=${M:-131072}
  $P <<SQL
CREATE EXTENSION gpuindex;
CREATE TABLE tu (k int8, payload int8);
INSERT INTO tu SELECT (i * 2654435761) % $N, i FROM generate_series(0, $N - 1) i;
CREATE TABLE tz (k int8, payload int8);
INSERT INTO tz SELECT (least(floor(pow(random(), -5)), 1000000)::int8 * 2654435761) % 4294967296, i FROM generate_series(0, $N - 1) i;
CREATE INDEX tu_g ON tu USING gpu_btree (k); CREATE INDEX tu_b ON tu (k);
CREATE INDEX tz_g ON tz USING gpu_btree (k); CREATE INDEX tz_b ON tz (k);
${1:-}
VACUUM ANALYZE tu; VACUUM ANALYZE tz;
SELECT setseed(0.25);
CREATE TABLE probes AS
  SELECT 'tu' AS t, array_agg(k)::text a FROM (SELECT (random() * $N * 1.09)::int8 FROM generate_series(1, $M)) g(k)
  UNION ALL
  SELECT 'tz', array_agg(k)::text FROM (SELECT k FROM (SELECT DISTINCT k FROM tz) d ORDER BY random() LIMIT $M) g(k);
SQL
}

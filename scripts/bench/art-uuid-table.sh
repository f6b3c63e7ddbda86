# Sourced by the gpu_art uuid bench scripts after bundle-server.sh ($P):
# builds bu (ROWS random uuids, default 10^7, with payload), its gpu_art,
# btree and hash indexes, and keys128 (one row: an array of 128,000 of its
# keys, from rows all over the table).
$P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bu (k uuid, payload int);
INSERT INTO bu SELECT gen_random_uuid(), g FROM generate_series(1, ${ROWS:-10000000}) g;
VACUUM ANALYZE bu;
SET maintenance_work_mem = '4GB';
CREATE INDEX bu_a ON bu USING gpu_art (k);
CREATE INDEX bu_b ON bu (k);
CREATE INDEX bu_h ON bu USING hash (k);
CREATE TABLE keys128 AS SELECT array_agg(k) AS a FROM (SELECT k FROM bu WHERE random() < 0.014 ORDER BY random() LIMIT 128000) s;
-- Again: every page all-visible, as index-only scans need (the first
-- one, right after the load, left a third of them unmarked locally).
VACUUM ANALYZE bu;
SQL

#!/bin/bash
# Next to a bundle folder `pg` with bundle-server.sh, on a fresh server:
# 10^7 random uuids, gpu_art and hash indexes, 128K of the keys in one
# array; EXPLAIN ANALYZE of gpu_art_probe joined back by ctid, of the
# function alone, of hash's nested loop, and of the array alone.
cd "$(dirname "$0")"
conf='shared_buffers=24GB;max_wal_size=16GB'
source ./bundle-server.sh
t0=$(date +%s)
$P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bu (k uuid, payload int8);
INSERT INTO bu SELECT gen_random_uuid(), g FROM generate_series(1, 10000000) g;
VACUUM ANALYZE bu;
SET maintenance_work_mem = '4GB';
CREATE INDEX bu_a ON bu USING gpu_art (k);
CREATE INDEX bu_h ON bu USING hash (k);
CREATE TABLE keys (a uuid[]); ALTER TABLE keys ALTER a SET STORAGE EXTERNAL;
INSERT INTO keys SELECT array_agg(k) FROM (SELECT k FROM bu WHERE random() < 0.014 ORDER BY random() LIMIT 128000) s;
VACUUM ANALYZE bu;
SELECT pg_prewarm('bu'), pg_prewarm('bu_a'), pg_prewarm('bu_h');
SQL
echo "setup $(( $(date +%s) - t0 )) s"
$P <<SQL 2>&1 | grep -E "Execution|Index Time|Heap Time|Planning|Function Scan|Custom"
SET enable_hashjoin = off; SET enable_mergejoin = off;
SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT sum(t.payload) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT sum(t.payload) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p JOIN bu t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys)) p;
EXPLAIN (ANALYZE) SELECT count(*) FROM unnest((SELECT a FROM keys)) u(k);
BEGIN; DROP INDEX bu_a;
SELECT count(*) FROM unnest((SELECT a FROM keys)) u(k) JOIN bu t ON t.k = u.k;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM unnest((SELECT a FROM keys)) u(k) JOIN bu t ON t.k = u.k;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM unnest((SELECT a FROM keys)) u(k) JOIN bu t ON t.k = u.k;
EXPLAIN (ANALYZE, TIMING OFF) SELECT sum(t.payload) FROM unnest((SELECT a FROM keys)) u(k) JOIN bu t ON t.k = u.k;
ROLLBACK;
SQL
$RT/pg-stop >/dev/null

#!/bin/bash
# Copy next to a bundle folder `pg` with bundle-server.sh and run on a
# fresh server: 10^7 URL-like keys (made in SQL), gpu_art and hash
# indexes, 128K of the keys in one uncompressed array; EXPLAIN ANALYZE of
# gpu_art_probe joined back by ctid (GpuIndexJoin's Index Time), of the
# function alone, and of the join over hash's nested loop.
cd "$(dirname "$0")"
conf='shared_buffers=24GB;max_wal_size=16GB'
source ./bundle-server.sh
t0=$(date +%s)
$P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bs2 (k text COLLATE "C", payload int8);
INSERT INTO bs2 SELECT 'https://www.site' || (hashint4(g) & 1023) || '.com/section-' || (g % 37) || '/item-' || md5(g::text), g FROM generate_series(1, 10000000) g;
VACUUM ANALYZE bs2;
SET maintenance_work_mem = '4GB';
CREATE INDEX bs2_a ON bs2 USING gpu_art (k);
CREATE INDEX bs2_h ON bs2 USING hash (k);
CREATE TABLE keys2 (a text[]); ALTER TABLE keys2 ALTER a SET STORAGE EXTERNAL;
INSERT INTO keys2 SELECT array_agg(k) FROM (SELECT k FROM bs2 WHERE random() < 0.014 ORDER BY random() LIMIT 128000) s;
VACUUM ANALYZE bs2;
SELECT pg_prewarm('bs2'), pg_prewarm('bs2_a'), pg_prewarm('bs2_h');
SQL
echo "setup $(( $(date +%s) - t0 )) s"
$P <<SQL 2>&1 | grep -E "Time|Heap|Fetch|Scan|Loop|Index"
SET enable_hashjoin = off; SET enable_mergejoin = off;
SELECT count(*) FROM gpu_art_probe('bs2_a', (SELECT a FROM keys2)) p JOIN bs2 t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bs2_a', (SELECT a FROM keys2)) p JOIN bs2 t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bs2_a', (SELECT a FROM keys2)) p JOIN bs2 t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bs2_a', (SELECT a FROM keys2)) p JOIN bs2 t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bs2_a', (SELECT a FROM keys2)) p;
BEGIN; DROP INDEX bs2_a;
SELECT count(*) FROM unnest((SELECT a FROM keys2)) u(k) JOIN bs2 t ON t.k = u.k;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM unnest((SELECT a FROM keys2)) u(k) JOIN bs2 t ON t.k = u.k;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM unnest((SELECT a FROM keys2)) u(k) JOIN bs2 t ON t.k = u.k;
ROLLBACK;
SQL
$RT/pg-stop >/dev/null

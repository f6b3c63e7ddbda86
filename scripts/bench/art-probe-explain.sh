#!/bin/bash
# Copy next to a bundle folder `pg` with bundle-server.sh and run on a
# fresh server: 10^7 keys made in SQL (KEYS=urls: URL-like text, the
# default; KEYS=uuid: random uuids), gpu_art and hash indexes, 128K of the
# keys in one uncompressed array; EXPLAIN ANALYZE of gpu_art_probe joined
# back by ctid (GpuIndexJoin's Index and Heap Time; count, then a column
# read from the heap), of the function alone, of the array alone, and of
# the join over hash's nested loop.
cd "$(dirname "$0")"
conf='shared_buffers=24GB;max_wal_size=16GB'
source ./bundle-server.sh
case "${KEYS:-urls}" in
  urls) col='text COLLATE "C"'
        gen="'https://www.site' || (hashint4(g) & 1023) || '.com/section-' || (g % 37) || '/item-' || md5(g::text)" ;;
  uuid) col=uuid; gen='gen_random_uuid()' ;;
  *) echo "KEYS: urls or uuid" >&2; exit 2 ;;
esac
t0=$(date +%s)
$P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bk (k $col, payload int8);
INSERT INTO bk SELECT $gen, g FROM generate_series(1, 10000000) g;
VACUUM ANALYZE bk;
SET maintenance_work_mem = '4GB';
CREATE INDEX bk_a ON bk USING gpu_art (k);
CREATE INDEX bk_h ON bk USING hash (k);
CREATE TABLE keys (a ${col%% *}[]); ALTER TABLE keys ALTER a SET STORAGE EXTERNAL;
INSERT INTO keys SELECT array_agg(k) FROM (SELECT k FROM bk WHERE random() < 0.014 ORDER BY random() LIMIT 128000) s;
VACUUM ANALYZE bk;
SELECT pg_prewarm('bk'), pg_prewarm('bk_a'), pg_prewarm('bk_h');
SQL
echo "setup $(( $(date +%s) - t0 )) s"
probe="FROM gpu_art_probe('bk_a', (SELECT a FROM keys)) p JOIN bk t ON t.ctid = p.ctid"
join="FROM unnest((SELECT a FROM keys)) u(k) JOIN bk t ON t.k = u.k"
$P <<SQL 2>&1 | grep -E "Execution|Index Time|Heap Time|Planning|Function Scan|Custom"
SET enable_hashjoin = off; SET enable_mergejoin = off;
SELECT count(*) $probe;
EXPLAIN (ANALYZE) SELECT count(*) $probe;
EXPLAIN (ANALYZE) SELECT count(*) $probe;
EXPLAIN (ANALYZE) SELECT count(*) $probe;
EXPLAIN (ANALYZE) SELECT sum(t.payload) $probe;
EXPLAIN (ANALYZE) SELECT sum(t.payload) $probe;
EXPLAIN (ANALYZE) SELECT count(*) FROM gpu_art_probe('bk_a', (SELECT a FROM keys)) p;
EXPLAIN (ANALYZE) SELECT count(*) FROM unnest((SELECT a FROM keys)) u(k);
BEGIN; DROP INDEX bk_a;
SELECT count(*) $join;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) $join;
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) $join;
EXPLAIN (ANALYZE, TIMING OFF) SELECT sum(t.payload) $join;
ROLLBACK;
SQL
$RT/pg-stop >/dev/null

-- gpu_learned: every type, operator and scan kind; EXPLAIN shows the index;
-- errors for what it does not do. The extremes and NULLs arrive after
-- CREATE INDEX (in the delta), the rest is in the run: scans merge both.
-- (No autovacuum on the tables whose deltas are counted: its VACUUM
-- would merge or clean them at moments of its own.)
SET client_min_messages = warning;
SET gpuindex.device = cpu;

CREATE TABLE gl (id int, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, d date, ts timestamp, tz timestamptz) WITH (autovacuum_enabled = off);
INSERT INTO gl
SELECT g, (g % 50 - 25)::int2, g % 1000 - 500, (g::int8 * 7919) % 100003 - 50000,
       ((g % 200) - 100)::float4 / 4, ((g % 300) - 150)::float8 / 8,
       date '2000-01-01' + (g % 400), timestamp '2020-01-01' + (g % 500) * interval '1 hour',
       timestamptz '2020-01-01 00:00+00' + (g % 600) * interval '1 minute'
FROM generate_series(1, 3000) g;
CREATE INDEX gl_i2 ON gl USING gpu_learned (i2);
CREATE INDEX gl_i4 ON gl USING gpu_learned (i4);
CREATE INDEX gl_i8 ON gl USING gpu_learned (i8);
CREATE INDEX gl_f4 ON gl USING gpu_learned (f4);
CREATE INDEX gl_f8 ON gl USING gpu_learned (f8);
CREATE INDEX gl_d ON gl USING gpu_learned (d);
CREATE INDEX gl_ts ON gl USING gpu_learned (ts);
CREATE INDEX gl_tz ON gl USING gpu_learned (tz);
-- extremes, specials, NULLs
INSERT INTO gl VALUES
  (10001, -32768, -2147483648, -9223372036854775808, '-Infinity', '-Infinity', '-infinity', '-infinity', '-infinity'),
  (10002, 32767, 2147483647, 9223372036854775807, 'Infinity', 'Infinity', 'infinity', 'infinity', 'infinity'),
  (10003, 0, 0, 0, 'NaN', 'NaN', '2000-01-01', '2020-01-01', '2020-01-01 00:00+00'),
  (10004, 0, 0, 0, '-0', '-0', NULL, NULL, NULL),
  (10005, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (10006, NULL, NULL, NULL, 'NaN', 'NaN', NULL, NULL, NULL);

SELECT c.relname, v.part, v.level, v.pages, v.entries, v.dead
FROM pg_class c, gpu_learned_check(c.oid) v
WHERE c.relname LIKE 'gl\_%' ORDER BY 1, 2, 3;
SELECT amvalidate(oid) AS valid, opcname FROM pg_opclass
WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'gpu_learned') ORDER BY opcname;

-- Every query, once by sequential scan and then through each scan kind of
-- the index: the answers must be the same.
CREATE FUNCTION gl_got() RETURNS TABLE (q text, ids int[]) LANGUAGE sql AS $$
SELECT 'i8 = -49945' AS q, array_agg(id ORDER BY id) AS ids FROM gl WHERE i8 = -49945
UNION ALL SELECT 'i8 < -49990', array_agg(id ORDER BY id) FROM gl WHERE i8 < -49990
UNION ALL SELECT 'i8 <= -49990', array_agg(id ORDER BY id) FROM gl WHERE i8 <= -49990
UNION ALL SELECT 'i8 > 49990', array_agg(id ORDER BY id) FROM gl WHERE i8 > 49990
UNION ALL SELECT 'i8 >= 49990', array_agg(id ORDER BY id) FROM gl WHERE i8 >= 49990
UNION ALL SELECT 'i8 between', array_agg(id ORDER BY id) FROM gl WHERE i8 BETWEEN -100 AND 100
UNION ALL SELECT 'i8 any', array_agg(id ORDER BY id) FROM gl WHERE i8 = ANY (ARRAY[7, 8, -50000, 9223372036854775807, NULL])
UNION ALL SELECT 'i8 any many', array_agg(id ORDER BY id) FROM gl WHERE i8 = ANY (ARRAY(SELECT g * 7 FROM generate_series(-7200, 7200) g))
UNION ALL SELECT 'i8 any int4', array_agg(id ORDER BY id) FROM gl WHERE i8 = ANY (ARRAY[7, 8, 2147483647]::int4[])
UNION ALL SELECT 'i8 < any', array_agg(id ORDER BY id) FROM gl WHERE i8 < ANY (ARRAY[-49990, -49995])
UNION ALL SELECT 'i8 null', array_agg(id ORDER BY id) FROM gl WHERE i8 IS NULL
UNION ALL SELECT 'i8 = int2', array_agg(id ORDER BY id) FROM gl WHERE i8 = 0::int2
UNION ALL SELECT 'i2 = int8', array_agg(id ORDER BY id) FROM gl WHERE i2 = 24::int8
UNION ALL SELECT 'i2 > big', array_agg(id ORDER BY id) FROM gl WHERE i2 > 100000::int8
UNION ALL SELECT 'i2 < big', array_agg(id ORDER BY id) FROM gl WHERE i2 < -32767::int4
UNION ALL SELECT 'i4 range', array_agg(id ORDER BY id) FROM gl WHERE i4 > 490 AND i4 <= 499
UNION ALL SELECT 'i4 max', array_agg(id ORDER BY id) FROM gl WHERE i4 >= 2147483647
UNION ALL SELECT 'f4 = 0', array_agg(id ORDER BY id) FROM gl WHERE f4 = 0
UNION ALL SELECT 'f4 = -0', array_agg(id ORDER BY id) FROM gl WHERE f4 = '-0'
UNION ALL SELECT 'f4 nan', array_agg(id ORDER BY id) FROM gl WHERE f4 = 'NaN'
UNION ALL SELECT 'f4 > inf', array_agg(id ORDER BY id) FROM gl WHERE f4 > 'Infinity'
UNION ALL SELECT 'f4 < 0', array_agg(id ORDER BY id) FROM gl WHERE f4 < 0 AND f4 > -1
UNION ALL SELECT 'f4 = f8', array_agg(id ORDER BY id) FROM gl WHERE f4 = 0.25::float8
UNION ALL SELECT 'f8 <= 0', array_agg(id ORDER BY id) FROM gl WHERE f8 <= 0 AND f8 > -0.5
UNION ALL SELECT 'f8 >= -0', array_agg(id ORDER BY id) FROM gl WHERE f8 >= '-0' AND f8 < 0.3
UNION ALL SELECT 'f8 = f4', array_agg(id ORDER BY id) FROM gl WHERE f8 = 0.125::float4
UNION ALL SELECT 'f8 any', array_agg(id ORDER BY id) FROM gl WHERE f8 = ANY (ARRAY[0, 'NaN', '-Infinity', 1.5])
UNION ALL SELECT 'd range', array_agg(id ORDER BY id) FROM gl WHERE d BETWEEN '2000-12-30' AND '2001-01-02'
UNION ALL SELECT 'd inf', array_agg(id ORDER BY id) FROM gl WHERE d > '2100-01-01'
UNION ALL SELECT 'ts =', array_agg(id ORDER BY id) FROM gl WHERE ts = '2020-01-10 12:00'
UNION ALL SELECT 'ts <', array_agg(id ORDER BY id) FROM gl WHERE ts < '2020-01-01 01:00'
UNION ALL SELECT 'tz >=', array_agg(id ORDER BY id) FROM gl WHERE tz >= '2020-01-01 09:58+00'
UNION ALL SELECT 'tz not null', array_agg(id ORDER BY id) FROM gl WHERE tz IS NOT NULL AND tz < '2020-01-01 00:01+00'
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE want AS SELECT * FROM gl_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gl WHERE i8 = 7;
EXPLAIN (COSTS OFF) SELECT id FROM gl WHERE i8 = ANY (ARRAY[7, 8]);
EXPLAIN (COSTS OFF) SELECT id FROM gl WHERE i2 = 24::int8;
EXPLAIN (COSTS OFF) SELECT id FROM gl WHERE i8 IS NULL;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, cardinality(w.ids) AS n FROM want w JOIN gl_got() g USING (q) ORDER BY w.q;
SET enable_indexscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT id FROM gl WHERE i8 BETWEEN -100 AND 100;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS bitmap_scan_ok FROM want w JOIN gl_got() g USING (q) ORDER BY w.q;
RESET enable_indexscan; RESET enable_bitmapscan;

-- Ordered scans, both directions, with NULLs where btree puts them.
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT i8 FROM gl ORDER BY i8 DESC LIMIT 3;
SELECT i8 FROM gl ORDER BY i8 LIMIT 3;
SELECT i8 FROM gl ORDER BY i8 DESC LIMIT 4;
SELECT f8 FROM gl ORDER BY f8 DESC LIMIT 4;
SELECT f4 FROM gl WHERE f4 >= '-0' ORDER BY f4 LIMIT 3;
SELECT i4 FROM gl WHERE i4 < 0 ORDER BY i4 DESC LIMIT 3;
SELECT d FROM gl WHERE d IS NOT NULL ORDER BY d DESC LIMIT 2;
-- index-only scans return the stored values exactly (-0 stays -0)
EXPLAIN (COSTS OFF) SELECT f8 FROM gl WHERE f8 = 0;
SELECT f8::text FROM gl WHERE f8 = 0 ORDER BY 1;
-- a cursor that changes direction
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT i8 FROM gl WHERE i8 BETWEEN -50000 AND -49800 ORDER BY i8;
FETCH 3 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 1 FROM c;
COMMIT;
RESET enable_seqscan; RESET enable_bitmapscan;

-- Inserts: page splits, NULLs, the checker after each.
INSERT INTO gl (id, i8) SELECT 20000 + g, g % 97 FROM generate_series(1, 5000) g;
INSERT INTO gl (id, i8) SELECT 30000 + g, NULL FROM generate_series(1, 2000) g;
SELECT part, level, pages > 0 AS has_pages, entries FROM gpu_learned_check('gl_i8');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM gl WHERE i8 = 13;
SELECT count(*) FROM gl WHERE i8 IS NULL;
-- a cursor over keys of the run and the delta interleaved, changing direction
INSERT INTO gl (id, i8) SELECT 40000 + g, -50000 + 13 * g FROM generate_series(0, 20) g;
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT i8 FROM gl WHERE i8 BETWEEN -50000 AND -49700 ORDER BY i8;
FETCH 4 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH ABSOLUTE 10 FROM c;
FETCH BACKWARD 3 FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 2 FROM c;
FETCH FORWARD 5 FROM c;
FETCH BACKWARD 1 FROM c;
COMMIT;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*) FROM gl WHERE i8 = 13;

-- VACUUM marks the run's dead entries and removes the delta's; REINDEX
-- rebuilds one run of them all.
DELETE FROM gl WHERE id > 20000 OR id % 5 = 0;
VACUUM gl;
SELECT part, level, entries, dead FROM gpu_learned_check('gl_i8');
REINDEX INDEX gl_i8;
SELECT part, level, entries, dead FROM gpu_learned_check('gl_i8');

-- Merges: the delta folded into a new run, by gpu_learned_merge and by
-- VACUUM (once the delta holds an eighth of the run); NULLs stay in the
-- delta. The answers stay the sequential scan's, and a cursor opened
-- before a merge goes on reading the generation it started on.
CREATE TABLE glm (id int, k int8) WITH (autovacuum_enabled = off);
INSERT INTO glm SELECT g, (g::int8 * 7919) % 10007 FROM generate_series(1, 20000) g;
CREATE INDEX glm_k ON glm USING gpu_learned (k);
INSERT INTO glm SELECT 20000 + g, g % 500 FROM generate_series(1, 3000) g;
INSERT INTO glm VALUES (30001, NULL), (30002, -9223372036854775808), (30003, 9223372036854775807);
DELETE FROM glm WHERE id % 10 = 0;
CREATE FUNCTION glm_got() RETURNS TABLE (q text, n bigint, s numeric) LANGUAGE sql AS $$
SELECT 'eq', count(*), sum(id) FROM glm WHERE k = 123
UNION ALL SELECT 'range', count(*), sum(id) FROM glm WHERE k BETWEEN 100 AND 4000
UNION ALL SELECT 'any', count(*), sum(id) FROM glm WHERE k = ANY (ARRAY(SELECT g * 3 FROM generate_series(0, 99) g))
UNION ALL SELECT 'lt', count(*), sum(id) FROM glm WHERE k < 10
UNION ALL SELECT 'null', count(*), sum(id) FROM glm WHERE k IS NULL
UNION ALL SELECT 'extremes', count(*), sum(id) FROM glm WHERE k = -9223372036854775808 OR k = 9223372036854775807
UNION ALL SELECT 'first', count(*), sum(id) FROM (SELECT id FROM glm WHERE k > 400 ORDER BY k, id LIMIT 50) f
UNION ALL SELECT 'last', count(*), sum(id) FROM (SELECT id FROM glm ORDER BY k DESC, id DESC LIMIT 50) l
$$;
-- glm_got() by sequential scan, then through the index (bitmap scans or
-- index scans): the same?
CREATE FUNCTION glm_same(bitmap boolean) RETURNS TABLE (q text, same boolean) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('enable_seqscan', 'on', true), set_config('enable_indexscan', 'off', true),
          set_config('enable_bitmapscan', 'off', true);
  CREATE TEMP TABLE glm_want ON COMMIT DROP AS SELECT * FROM glm_got();
  PERFORM set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', (NOT bitmap)::text, true),
          set_config('enable_bitmapscan', bitmap::text, true);
  RETURN QUERY SELECT w.q, (w.n, w.s) IS NOT DISTINCT FROM (g.n, g.s) FROM glm_want w JOIN glm_got() g USING (q) ORDER BY w.q;
END $$;
SELECT * FROM glm_same(false);
SELECT gpu_learned_merge('glm_k');
SELECT part, level, pages, entries, dead FROM gpu_learned_check('glm_k');
SELECT * FROM glm_same(false);
SELECT * FROM glm_same(true);
SELECT gpu_learned_merge('glm_k');
-- inserts after a merge go to the new delta
INSERT INTO glm SELECT 35000 + g, g % 700 FROM generate_series(1, 500) g;
SELECT * FROM glm_same(false);
SELECT * FROM glm_same(true);
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashagg = off;
-- a cursor across a merge (in its own transaction: the merge waits for no one)
BEGIN;
INSERT INTO glm SELECT 40000 + g, 100 + g % 5 FROM generate_series(1, 2000) g;
DECLARE c CURSOR FOR SELECT k, count(*), sum(id) FROM glm WHERE k BETWEEN 100 AND 110 GROUP BY k ORDER BY k;
FETCH 3 FROM c;
SELECT gpu_learned_merge('glm_k');
FETCH ALL FROM c;
SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = on;
SELECT k, count(*), sum(id) FROM glm WHERE k BETWEEN 100 AND 110 GROUP BY k ORDER BY k;
COMMIT;
SELECT * FROM glm_same(false);
-- VACUUM merges a delta past an eighth of the run, not a smaller one
INSERT INTO glm SELECT 50000 + g, g FROM generate_series(1, 1000) g;
VACUUM glm;
SELECT part, level, entries FROM gpu_learned_check('glm_k') WHERE part = 'delta';
INSERT INTO glm SELECT 60000 + g, g FROM generate_series(1, 2000) g;
VACUUM glm;
SELECT part, level, entries FROM gpu_learned_check('glm_k') WHERE part = 'delta';
SELECT * FROM glm_same(false);
SELECT * FROM glm_same(true);
-- only the table's owner merges
CREATE ROLE regress_gpuindex_merge;
GRANT SELECT ON glm TO regress_gpuindex_merge;
SET ROLE regress_gpuindex_merge;
SELECT gpu_learned_merge('glm_k');
RESET ROLE;
REVOKE SELECT ON glm FROM regress_gpuindex_merge;
DROP ROLE regress_gpuindex_merge;
RESET enable_seqscan; RESET enable_bitmapscan; RESET enable_hashagg;
DROP TABLE glm;
DROP FUNCTION glm_got(), glm_same(boolean);

-- Duplicate-heavy keys: a run of one key is stored once with its TIDs
-- (run pages, about 2.3 times a plain page's 575 entries), by the build
-- and by merges; scans, VACUUM's dead bits and merges read both kinds.
CREATE TABLE gld (id int, k int8) WITH (autovacuum_enabled = off);
INSERT INTO gld SELECT g, CASE WHEN g <= 15000 THEN g % 5 * 1000 WHEN g <= 15600 THEN 2500 ELSE g END
FROM generate_series(1, 17000) g;
CREATE INDEX gld_k ON gld USING gpu_learned (k);
SELECT pages, entries, pages < ceil(entries / 575.0) AS deduplicated FROM gpu_learned_check('gld_k') WHERE part = 'run';
CREATE FUNCTION gld_got() RETURNS TABLE (q text, n bigint, s numeric) LANGUAGE sql AS $$
SELECT 'eq', count(*), sum(id) FROM gld WHERE k = 3000
UNION ALL SELECT 'eq short run', count(*), sum(id) FROM gld WHERE k = 2500
UNION ALL SELECT 'range', count(*), sum(id) FROM gld WHERE k BETWEEN 1000 AND 2500
UNION ALL SELECT 'range inside', count(*), sum(id) FROM gld WHERE k > 3999 AND k < 4001
UNION ALL SELECT 'range between', count(*), sum(id) FROM gld WHERE k > 1000 AND k < 2000
UNION ALL SELECT 'any', count(*), sum(id) FROM gld WHERE k = ANY (ARRAY[0, 999, 2000, 2500, 16001, 4000, 99999])
UNION ALL SELECT 'gt', count(*), sum(id) FROM gld WHERE k > 4000
UNION ALL SELECT 'first', count(*), sum(k) FROM (SELECT k FROM gld WHERE k >= 1000 ORDER BY k LIMIT 4000) f
UNION ALL SELECT 'last', count(*), sum(k) FROM (SELECT k FROM gld WHERE k <= 4000 ORDER BY k DESC LIMIT 3700) l
$$;
CREATE FUNCTION gld_same(bitmap boolean) RETURNS TABLE (q text, same boolean) LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('enable_seqscan', 'on', true), set_config('enable_indexscan', 'off', true),
          set_config('enable_bitmapscan', 'off', true), set_config('enable_indexonlyscan', 'off', true);
  CREATE TEMP TABLE gld_want ON COMMIT DROP AS SELECT * FROM gld_got();
  PERFORM set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', (NOT bitmap)::text, true),
          set_config('enable_bitmapscan', bitmap::text, true), set_config('enable_indexonlyscan', (NOT bitmap)::text, true);
  RETURN QUERY SELECT w.q, (w.n, w.s) IS NOT DISTINCT FROM (g.n, g.s) FROM gld_want w JOIN gld_got() g USING (q) ORDER BY w.q;
END $$;
SELECT * FROM gld_same(false);
SELECT * FROM gld_same(true);
DELETE FROM gld WHERE k = 3000 AND id % 7 <> 0;
VACUUM gld;
SELECT pages, entries, dead FROM gpu_learned_check('gld_k') WHERE part = 'run';
SELECT * FROM gld_same(false);
INSERT INTO gld SELECT 20000 + g, 2500 FROM generate_series(1, 2000) g;
SELECT gpu_learned_merge('gld_k');
SELECT pages, entries, dead, pages < ceil(entries / 575.0) AS deduplicated FROM gpu_learned_check('gld_k') WHERE part = 'run';
SELECT * FROM gld_same(false);
SELECT * FROM gld_same(true);
DROP TABLE gld;
DROP FUNCTION gld_got(), gld_same(boolean);

-- The delta's key tree is clear after a build and after a merge: key scans
-- then read the run alone (a lookup reads the run metapage and one data
-- page: with the table's visibility map page, 3 buffers) until a key goes
-- into the delta. NULLs (the delta's NULL chain) leave it clear.
CREATE TABLE glc (k int8, id int) WITH (autovacuum_enabled = off);
INSERT INTO glc SELECT g * 3, g FROM generate_series(1, 20000) g;
INSERT INTO glc VALUES (NULL, -1);
CREATE INDEX glc_k ON glc USING gpu_learned (k);
VACUUM glc;
CREATE FUNCTION glc_buffers(q int8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
  FOR l IN EXECUTE format('EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT k FROM glc WHERE k = %s', q) LOOP
    IF l ~ 'Buffers' THEN RETURN trim(l); END IF;
  END LOOP;
  RETURN NULL;
END $$;
SET enable_seqscan = off; SET enable_bitmapscan = off;
-- (The first scan of the session reads the run's model and directory.)
SELECT glc_buffers(300) IS NOT NULL AS warm;
SELECT glc_buffers(300) AS clear;
INSERT INTO glc VALUES (NULL, -2);
SELECT glc_buffers(300) AS nulls_leave_it_clear;
SELECT count(*) FROM glc WHERE k IS NULL;
INSERT INTO glc VALUES (301, -3);
SELECT glc_buffers(300) AS with_the_delta;
SELECT k, id FROM glc WHERE k IN (300, 301) ORDER BY k;
SELECT part, entries FROM gpu_learned_check('glc_k') WHERE part = 'delta';
SELECT gpu_learned_merge('glc_k');
SELECT glc_buffers(300) IS NOT NULL AS warm, glc_buffers(300) AS clear_after_the_merge;
-- A transaction sees its own key insert into a clear delta, in index,
-- index-only and bitmap scans and the probe function.
BEGIN;
INSERT INTO glc VALUES (305, -4);
SELECT k, id FROM glc WHERE k = 305;
SELECT k FROM glc WHERE k BETWEEN 300 AND 306 ORDER BY k;
SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = on;
SELECT count(*) FROM glc WHERE k IN (301, 305);
SELECT count(*) FROM gpu_learned_probe('glc_k', ARRAY[300, 301, 305, 306]::int8[]);
ROLLBACK;
SELECT count(*) FROM gpu_learned_check('glc_k');
RESET enable_seqscan; RESET enable_bitmapscan;
DROP TABLE glc;
DROP FUNCTION glc_buffers(int8);

-- The batch probe function.
SELECT p.ord, t.id FROM gpu_learned_probe('gl_i8', ARRAY[-49945, NULL, -49926, -49945, 123456789]::int8[]) p
JOIN gl t ON t.ctid = p.ctid ORDER BY p.ord, t.id;
SELECT count(*) FROM gpu_learned_probe('gl_i4', ARRAY(SELECT g FROM generate_series(-500, 500) g));
SELECT count(*) FROM gpu_learned_probe('gl_f8', ARRAY[0]::float8[]);
-- Keys searched page by page: runs of one key over several pages (4,286
-- and 2,338 rows), the keys beside them, deleted rows, misses; every key's
-- count equals the table's.
CREATE TABLE glp (k int8);
INSERT INTO glp SELECT CASE WHEN g % 7 = 0 THEN 5000 WHEN g % 11 = 0 THEN 7000 ELSE g END FROM generate_series(1, 30000) g;
CREATE INDEX glp_k ON glp USING gpu_learned (k);
DELETE FROM glp WHERE k % 17 = 0 OR (k = 5000 AND ctid < '(5,0)');
-- (The expected counts by a hash join over the table.)
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off; SET gpuindex.enable_join = off;
WITH keys AS (
  SELECT array_agg(x ORDER BY x) AS a FROM (
    SELECT k AS x FROM glp WHERE k % 13 = 0 OR k BETWEEN 4990 AND 5010 OR k BETWEEN 6990 AND 7010
    UNION SELECT x FROM unnest(ARRAY[-1, 17, 5000, 7000, 99999]) x) s),
got AS (SELECT p.ord, count(*) AS n FROM keys, gpu_learned_probe('glp_k', keys.a) p GROUP BY p.ord),
want AS (
  SELECT i AS ord, count(glp.k) AS n FROM keys CROSS JOIN generate_subscripts(keys.a, 1) i
  LEFT JOIN glp ON glp.k = keys.a[i] GROUP BY i)
SELECT count(*) AS keys, sum(want.n) AS rows, count(*) FILTER (WHERE coalesce(got.n, 0) <> want.n) AS differ
FROM want LEFT JOIN got USING (ord);
RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan; RESET gpuindex.enable_join;
DROP TABLE glp;

-- Parallel scans: a forward range split among the participants (the run's
-- pages and the delta's leaves); anything else taken whole by one.
CREATE TABLE glp (k int8, pad text);
INSERT INTO glp SELECT (g * 7919) % 200003, 'x' FROM generate_series(1, 200000) g;
CREATE INDEX glp_k ON glp USING gpu_learned (k);
INSERT INTO glp SELECT g % 1000, 'y' FROM generate_series(1, 20000) g;
INSERT INTO glp VALUES (NULL, 'z');
VACUUM ANALYZE glp;
CREATE TEMP TABLE glp_want AS
  SELECT 'range' AS q, count(*) AS n, sum(k) AS s FROM glp WHERE k BETWEEN 100 AND 150000
  UNION ALL SELECT 'any', count(*), sum(k) FROM glp WHERE k = ANY (ARRAY[1, 5, 999, 150000])
  UNION ALL SELECT 'desc', count(*), sum(k) FROM (SELECT k FROM glp WHERE k > 199000 ORDER BY k DESC LIMIT 500) d
  UNION ALL SELECT 'ordered', count(*), sum(k) FROM (SELECT k FROM glp WHERE k > 50 ORDER BY k LIMIT 30000) o;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_index_scan_size = 0;
SET max_parallel_workers_per_gather = 2; SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*), sum(k) FROM glp WHERE k BETWEEN 100 AND 150000;
SELECT w.q, w.n, (w.n, w.s) = (g.n, g.s) AS parallel_ok FROM glp_want w JOIN (
  SELECT 'range' AS q, count(*) AS n, sum(k) AS s FROM glp WHERE k BETWEEN 100 AND 150000
  UNION ALL SELECT 'any', count(*), sum(k) FROM glp WHERE k = ANY (ARRAY[1, 5, 999, 150000])
  UNION ALL SELECT 'desc', count(*), sum(k) FROM (SELECT k FROM glp WHERE k > 199000 ORDER BY k DESC LIMIT 500) d
  UNION ALL SELECT 'ordered', count(*), sum(k) FROM (SELECT k FROM glp WHERE k > 50 ORDER BY k LIMIT 30000) o) g USING (q)
ORDER BY w.q;
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_index_scan_size;
RESET max_parallel_workers_per_gather; RESET enable_seqscan; RESET enable_bitmapscan;
DROP TABLE glp;

-- Errors.
CREATE INDEX ON gl USING gpu_learned ((id::text));
CREATE INDEX ON gl USING gpu_learned (i4, i8);
CREATE UNIQUE INDEX ON gl USING gpu_learned (id);
CREATE INDEX ON gl USING gpu_learned (i8) WITH (fillfactor = 5);
SELECT * FROM gpu_learned_probe('gl', ARRAY[1]);
SELECT * FROM gpu_learned_probe('gl_i8', ARRAY[1.5]::float8[]);
SELECT * FROM gpu_learned_probe('gl_i8', ARRAY['x']);
CREATE TABLE glx (k int8, EXCLUDE USING gpu_learned (k WITH =));
INSERT INTO glx VALUES (1);

DROP TABLE gl, glx;
DROP FUNCTION gl_got();

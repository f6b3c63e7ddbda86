-- gpu_btree: every type, operator and scan kind; EXPLAIN shows the index;
-- errors for what it does not do.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

CREATE TABLE gb (id int, i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, d date, ts timestamp, tz timestamptz) WITH (autovacuum_enabled = off);
INSERT INTO gb
SELECT g, (g % 50 - 25)::int2, g % 1000 - 500, (g::int8 * 7919) % 100003 - 50000,
       ((g % 200) - 100)::float4 / 4, ((g % 300) - 150)::float8 / 8,
       date '2000-01-01' + (g % 400), timestamp '2020-01-01' + (g % 500) * interval '1 hour',
       timestamptz '2020-01-01 00:00+00' + (g % 600) * interval '1 minute'
FROM generate_series(1, 3000) g;
-- extremes, specials, NULLs
INSERT INTO gb VALUES
  (10001, -32768, -2147483648, -9223372036854775808, '-Infinity', '-Infinity', '-infinity', '-infinity', '-infinity'),
  (10002, 32767, 2147483647, 9223372036854775807, 'Infinity', 'Infinity', 'infinity', 'infinity', 'infinity'),
  (10003, 0, 0, 0, 'NaN', 'NaN', '2000-01-01', '2020-01-01', '2020-01-01 00:00+00'),
  (10004, 0, 0, 0, '-0', '-0', NULL, NULL, NULL),
  (10005, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
  (10006, NULL, NULL, NULL, 'NaN', 'NaN', NULL, NULL, NULL);

CREATE INDEX gb_i2 ON gb USING gpu_btree (i2);
CREATE INDEX gb_i4 ON gb USING gpu_btree (i4);
CREATE INDEX gb_i8 ON gb USING gpu_btree (i8);
CREATE INDEX gb_f4 ON gb USING gpu_btree (f4);
CREATE INDEX gb_f8 ON gb USING gpu_btree (f8);
CREATE INDEX gb_d ON gb USING gpu_btree (d);
CREATE INDEX gb_ts ON gb USING gpu_btree (ts);
CREATE INDEX gb_tz ON gb USING gpu_btree (tz);
SELECT c.relname, v.level, v.pages, v.entries, v.missing_downlinks
FROM pg_class c, gpu_btree_check(c.oid) v
WHERE c.relname LIKE 'gb\_%' ORDER BY 1, 2;
SELECT amvalidate(oid) AS valid, opcname FROM pg_opclass
WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'gpu_btree') ORDER BY opcname;

-- Every query, once by sequential scan and then through each scan kind of
-- the index: the answers must be the same.
CREATE FUNCTION gb_got() RETURNS TABLE (q text, ids int[]) LANGUAGE sql AS $$
SELECT 'i8 = -49945' AS q, array_agg(id ORDER BY id) AS ids FROM gb WHERE i8 = -49945
UNION ALL SELECT 'i8 < -49990', array_agg(id ORDER BY id) FROM gb WHERE i8 < -49990
UNION ALL SELECT 'i8 <= -49990', array_agg(id ORDER BY id) FROM gb WHERE i8 <= -49990
UNION ALL SELECT 'i8 > 49990', array_agg(id ORDER BY id) FROM gb WHERE i8 > 49990
UNION ALL SELECT 'i8 >= 49990', array_agg(id ORDER BY id) FROM gb WHERE i8 >= 49990
UNION ALL SELECT 'i8 between', array_agg(id ORDER BY id) FROM gb WHERE i8 BETWEEN -100 AND 100
UNION ALL SELECT 'i8 any', array_agg(id ORDER BY id) FROM gb WHERE i8 = ANY (ARRAY[7, 8, -50000, 9223372036854775807, NULL])
UNION ALL SELECT 'i8 any int4', array_agg(id ORDER BY id) FROM gb WHERE i8 = ANY (ARRAY[7, 8, 2147483647]::int4[])
UNION ALL SELECT 'i8 < any', array_agg(id ORDER BY id) FROM gb WHERE i8 < ANY (ARRAY[-49990, -49995])
UNION ALL SELECT 'i8 null', array_agg(id ORDER BY id) FROM gb WHERE i8 IS NULL
UNION ALL SELECT 'i8 = int2', array_agg(id ORDER BY id) FROM gb WHERE i8 = 0::int2
UNION ALL SELECT 'i2 = int8', array_agg(id ORDER BY id) FROM gb WHERE i2 = 24::int8
UNION ALL SELECT 'i2 > big', array_agg(id ORDER BY id) FROM gb WHERE i2 > 100000::int8
UNION ALL SELECT 'i2 < big', array_agg(id ORDER BY id) FROM gb WHERE i2 < -32767::int4
UNION ALL SELECT 'i4 range', array_agg(id ORDER BY id) FROM gb WHERE i4 > 490 AND i4 <= 499
UNION ALL SELECT 'i4 max', array_agg(id ORDER BY id) FROM gb WHERE i4 >= 2147483647
UNION ALL SELECT 'f4 = 0', array_agg(id ORDER BY id) FROM gb WHERE f4 = 0
UNION ALL SELECT 'f4 = -0', array_agg(id ORDER BY id) FROM gb WHERE f4 = '-0'
UNION ALL SELECT 'f4 nan', array_agg(id ORDER BY id) FROM gb WHERE f4 = 'NaN'
UNION ALL SELECT 'f4 > inf', array_agg(id ORDER BY id) FROM gb WHERE f4 > 'Infinity'
UNION ALL SELECT 'f4 < 0', array_agg(id ORDER BY id) FROM gb WHERE f4 < 0 AND f4 > -1
UNION ALL SELECT 'f4 = f8', array_agg(id ORDER BY id) FROM gb WHERE f4 = 0.25::float8
UNION ALL SELECT 'f8 <= 0', array_agg(id ORDER BY id) FROM gb WHERE f8 <= 0 AND f8 > -0.5
UNION ALL SELECT 'f8 >= -0', array_agg(id ORDER BY id) FROM gb WHERE f8 >= '-0' AND f8 < 0.3
UNION ALL SELECT 'f8 = f4', array_agg(id ORDER BY id) FROM gb WHERE f8 = 0.125::float4
UNION ALL SELECT 'f8 any', array_agg(id ORDER BY id) FROM gb WHERE f8 = ANY (ARRAY[0, 'NaN', '-Infinity', 1.5])
UNION ALL SELECT 'd range', array_agg(id ORDER BY id) FROM gb WHERE d BETWEEN '2000-12-30' AND '2001-01-02'
UNION ALL SELECT 'd inf', array_agg(id ORDER BY id) FROM gb WHERE d > '2100-01-01'
UNION ALL SELECT 'ts =', array_agg(id ORDER BY id) FROM gb WHERE ts = '2020-01-10 12:00'
UNION ALL SELECT 'ts <', array_agg(id ORDER BY id) FROM gb WHERE ts < '2020-01-01 01:00'
UNION ALL SELECT 'tz >=', array_agg(id ORDER BY id) FROM gb WHERE tz >= '2020-01-01 09:58+00'
UNION ALL SELECT 'tz not null', array_agg(id ORDER BY id) FROM gb WHERE tz IS NOT NULL AND tz < '2020-01-01 00:01+00'
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE want AS SELECT * FROM gb_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gb WHERE i8 = 7;
EXPLAIN (COSTS OFF) SELECT id FROM gb WHERE i8 = ANY (ARRAY[7, 8]);
EXPLAIN (COSTS OFF) SELECT id FROM gb WHERE i2 = 24::int8;
EXPLAIN (COSTS OFF) SELECT id FROM gb WHERE i8 IS NULL;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, cardinality(w.ids) AS n FROM want w JOIN gb_got() g USING (q) ORDER BY w.q;
SET enable_indexscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT id FROM gb WHERE i8 BETWEEN -100 AND 100;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS bitmap_scan_ok FROM want w JOIN gb_got() g USING (q) ORDER BY w.q;
RESET enable_indexscan; RESET enable_bitmapscan;

-- Ordered scans, both directions, with NULLs where btree puts them.
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT i8 FROM gb ORDER BY i8 DESC LIMIT 3;
SELECT i8 FROM gb ORDER BY i8 LIMIT 3;
SELECT i8 FROM gb ORDER BY i8 DESC LIMIT 4;
SELECT f8 FROM gb ORDER BY f8 DESC LIMIT 4;
SELECT f4 FROM gb WHERE f4 >= '-0' ORDER BY f4 LIMIT 3;
SELECT i4 FROM gb WHERE i4 < 0 ORDER BY i4 DESC LIMIT 3;
SELECT d FROM gb WHERE d IS NOT NULL ORDER BY d DESC LIMIT 2;
-- index-only scans return the stored values exactly (-0 stays -0)
EXPLAIN (COSTS OFF) SELECT f8 FROM gb WHERE f8 = 0;
SELECT f8::text FROM gb WHERE f8 = 0 ORDER BY 1;
-- a cursor that changes direction
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT i8 FROM gb WHERE i8 BETWEEN -50000 AND -49800 ORDER BY i8;
FETCH 3 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 1 FROM c;
COMMIT;
RESET enable_seqscan; RESET enable_bitmapscan;

-- Inserts: page splits, NULLs, the checker after each.
INSERT INTO gb (id, i8) SELECT 20000 + g, g % 97 FROM generate_series(1, 5000) g;
INSERT INTO gb (id, i8) SELECT 30000 + g, NULL FROM generate_series(1, 2000) g;
SELECT level, pages > 0 AS has_pages, entries FROM gpu_btree_check('gb_i8');
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM gb WHERE i8 = 13;
SELECT count(*) FROM gb WHERE i8 IS NULL;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*) FROM gb WHERE i8 = 13;

-- VACUUM removes dead entries and deletes the leaves it empties (the level
-- above loses their downlinks); REINDEX rebuilds.
DELETE FROM gb WHERE id > 20000;
VACUUM gb;
SELECT level, entries FROM gpu_btree_check('gb_i8');
REINDEX INDEX gb_i8;
SELECT level, entries FROM gpu_btree_check('gb_i8');

-- The batch probe function.
SELECT p.ord, t.id FROM gpu_btree_probe('gb_i8', ARRAY[-49945, NULL, -49926, -49945, 123456789]::int8[]) p
JOIN gb t ON t.ctid = p.ctid ORDER BY p.ord, t.id;
SELECT count(*) FROM gpu_btree_probe('gb_i4', ARRAY(SELECT g FROM generate_series(-500, 500) g));
SELECT count(*) FROM gpu_btree_probe('gb_f8', ARRAY[0]::float8[]);

-- A large = ANY walks the index once in key order, each leaf read once:
-- priced as ordered page reads, the index wins over a parallel sequential
-- scan (the generic estimate's random read per element kept the planner
-- on the sequential scan, three times slower at 128K elements over 10^7
-- rows). gpu_learned and gpu_art walk their arrays the same way.
CREATE TABLE gb_many (k int8, t text COLLATE "C") WITH (autovacuum_enabled = off);
INSERT INTO gb_many SELECT g * 3, lpad((g * 3)::text, 7, '0') FROM generate_series(1, 100000) g;
CREATE INDEX gb_many_k ON gb_many USING gpu_btree (k);
CREATE INDEX gb_many_t ON gb_many USING gpu_art (t);
VACUUM ANALYZE gb_many;
CREATE FUNCTION gb_scans(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (FORMAT JSON, COSTS OFF) ' || q INTO plan;
  RETURN QUERY WITH RECURSIVE n(node) AS (
    SELECT plan -> 0 -> 'Plan' UNION ALL SELECT c FROM n, json_array_elements(n.node -> 'Plans') c)
  SELECT concat_ws(' using ', node ->> 'Node Type', node ->> 'Index Name') FROM n WHERE node ->> 'Node Type' LIKE '%Scan%';
END $$;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
SET max_parallel_workers_per_gather = 4;
SELECT array_agg(g * 2)::text AS gb_keys, array_agg(lpad((g * 2)::text, 7, '0'))::text AS gb_texts
FROM generate_series(1, 12000) g \gset
SELECT gb_scans(format('SELECT count(*) FROM gb_many WHERE k = ANY (%L::int8[])', :'gb_keys'));
SELECT count(*) FROM gb_many WHERE k = ANY (:'gb_keys'::int8[]);
SELECT gb_scans(format('SELECT count(*) FROM gb_many WHERE t = ANY (%L::text[])', :'gb_texts'));
SELECT count(*) FROM gb_many WHERE t = ANY (:'gb_texts'::text[]);
BEGIN;
DROP INDEX gb_many_k;
CREATE INDEX gb_many_l ON gb_many USING gpu_learned (k);
SELECT gb_scans(format('SELECT count(*) FROM gb_many WHERE k = ANY (%L::int8[])', :'gb_keys'));
SELECT count(*) FROM gb_many WHERE k = ANY (:'gb_keys'::int8[]);
ROLLBACK;
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
RESET max_parallel_workers_per_gather;
DROP TABLE gb_many;
DROP FUNCTION gb_scans(text);

-- Errors.
CREATE INDEX ON gb USING gpu_btree ((id::text));
CREATE INDEX ON gb USING gpu_btree (i4, i8);
CREATE UNIQUE INDEX ON gb USING gpu_btree (id);
CREATE INDEX ON gb USING gpu_btree (i8) WITH (fillfactor = 5);
SELECT * FROM gpu_btree_probe('gb', ARRAY[1]);
SELECT * FROM gpu_btree_probe('gb_i8', ARRAY[1.5]::float8[]);
SELECT * FROM gpu_btree_probe('gb_i8', ARRAY['x']);
CREATE TABLE gbx (k int8, EXCLUDE USING gpu_btree (k WITH =));
INSERT INTO gbx VALUES (1);

DROP TABLE gb, gbx;
DROP FUNCTION gb_got();

-- gpu_art: every type, operator and scan kind; EXPLAIN shows the index;
-- errors for what it does not do. Text is indexed in the C collation.
SET client_min_messages = warning;

CREATE TABLE ga (id int, t text COLLATE "C", vc varchar(40) COLLATE "C", b bytea, u uuid) WITH (autovacuum_enabled = off);
INSERT INTO ga
SELECT g,
       CASE WHEN g % 10 = 0 THEN 'dup' WHEN g % 97 = 0 THEN '' ELSE 'https://www.site' || (g % 13) || '.com/p/' || g END,
       'v' || (g % 300),
       CASE WHEN g % 7 = 0 THEN '\x00'::bytea ELSE int4send(g) || '\x0000'::bytea END,
       md5(g::text)::uuid
FROM generate_series(1, 3000) g;
CREATE INDEX ga_t ON ga USING gpu_art (t);
CREATE INDEX ga_vc ON ga USING gpu_art (vc);
CREATE INDEX ga_b ON ga USING gpu_art (b);
CREATE INDEX ga_u ON ga USING gpu_art (u);
-- after the build: NULLs, extremes, a key near the limit
INSERT INTO ga VALUES
  (10001, NULL, NULL, NULL, NULL),
  (10002, repeat('z', 1990), repeat('y', 40), '\xffffff', 'ffffffff-ffff-ffff-ffff-ffffffffffff'),
  (10003, '', '', '\x', '00000000-0000-0000-0000-000000000000'),
  (10004, NULL, 'v1', NULL, NULL);
SELECT c.relname, v.level, v.pages > 0 AS has_pages, v.entries, v.missing_downlinks
FROM pg_class c, gpu_art_check(c.oid) v WHERE c.relname LIKE 'ga\_%' ORDER BY 1, 2;
SELECT amvalidate(oid) AS valid, opcname FROM pg_opclass
WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'gpu_art') ORDER BY opcname;

-- Every query, once by sequential scan and then through each scan kind of
-- the index: the answers must be the same.
CREATE FUNCTION ga_got() RETURNS TABLE (q text, ids int[]) LANGUAGE sql AS $$
SELECT 't =' AS q, array_agg(id ORDER BY id) AS ids FROM ga WHERE t = 'dup'
UNION ALL SELECT 't = empty', array_agg(id ORDER BY id) FROM ga WHERE t = ''
UNION ALL SELECT 't <', array_agg(id ORDER BY id) FROM ga WHERE t < 'https://www.site1.com/p/2'
UNION ALL SELECT 't <=', array_agg(id ORDER BY id) FROM ga WHERE t <= 'https://www.site1.com/p/1000'
UNION ALL SELECT 't >', array_agg(id ORDER BY id) FROM ga WHERE t > 'https://www.site9.com/p/900'
UNION ALL SELECT 't >=', array_agg(id ORDER BY id) FROM ga WHERE t >= 'https://www.site9.com/p/997'
UNION ALL SELECT 't between', array_agg(id ORDER BY id) FROM ga WHERE t BETWEEN 'https://www.site12' AND 'https://www.site2'
UNION ALL SELECT 't ^@', array_agg(id ORDER BY id) FROM ga WHERE t ^@ 'https://www.site11.com/p/1'
UNION ALL SELECT 't like', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'https://www.site3.com/p/2%'
UNION ALL SELECT 't like exact', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'dup'
UNION ALL SELECT 't like %%', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'https://www.site3.com/p/2%%'
UNION ALL SELECT 't like _', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'https://www.site3.com/p/2_'
UNION ALL SELECT 't like %_%', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'https://www.site1%/p/3%'
UNION ALL SELECT 't like escaped', array_agg(id ORDER BY id) FROM ga WHERE t LIKE 'https://www.site3.com/p/2\%'
UNION ALL SELECT 'vc like', array_agg(id ORDER BY id) FROM ga WHERE vc LIKE 'v2%'
UNION ALL SELECT 't ^@ empty', array_agg(id ORDER BY id) FROM ga WHERE t ^@ '' AND id > 2990
UNION ALL SELECT 't any', array_agg(id ORDER BY id) FROM ga WHERE t = ANY (ARRAY['dup', '', 'https://www.site4.com/p/30', 'nope', NULL])
UNION ALL SELECT 't any many', array_agg(id ORDER BY id) FROM ga WHERE t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 3) g))
UNION ALL SELECT 't any range', array_agg(id ORDER BY id) FROM ga WHERE t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 3) g) || ARRAY['dup', '']) AND t > 'https://www.site5'
UNION ALL SELECT 't any any', array_agg(id ORDER BY id) FROM ga WHERE t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 2) g) || ARRAY['dup']) AND t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 3) g) || ARRAY['dup', ''])
UNION ALL SELECT 't any desc', array_agg(hashtext(t)) FROM (SELECT t FROM ga WHERE t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 3) g) || ARRAY['dup', '', repeat('z', 1990)]) ORDER BY t DESC) x
UNION ALL SELECT 't null', array_agg(id ORDER BY id) FROM ga WHERE t IS NULL
UNION ALL SELECT 't not null', array_agg(id ORDER BY id) FROM ga WHERE t IS NOT NULL AND t > 'https://www.site9.com/p/990'
UNION ALL SELECT 't long', array_agg(id ORDER BY id) FROM ga WHERE t = repeat('z', 1990)
UNION ALL SELECT 't too long', array_agg(id ORDER BY id) FROM ga WHERE t = repeat('z', 5000)
UNION ALL SELECT 'vc =', array_agg(id ORDER BY id) FROM ga WHERE vc = 'v1'
UNION ALL SELECT 'vc range', array_agg(id ORDER BY id) FROM ga WHERE vc > 'v29' AND vc < 'v3'
UNION ALL SELECT 'b =', array_agg(id ORDER BY id) FROM ga WHERE b = '\x00'
UNION ALL SELECT 'b <', array_agg(id ORDER BY id) FROM ga WHERE b < '\x0000'
UNION ALL SELECT 'b range', array_agg(id ORDER BY id) FROM ga WHERE b > '\x00' AND b <= '\x00000100'
UNION ALL SELECT 'b empty', array_agg(id ORDER BY id) FROM ga WHERE b = '\x'
UNION ALL SELECT 'b any', array_agg(id ORDER BY id) FROM ga WHERE b = ANY (ARRAY['\x000000070000', '\xffffff', '\x00']::bytea[])
UNION ALL SELECT 'u =', array_agg(id ORDER BY id) FROM ga WHERE u = md5('77')::uuid
UNION ALL SELECT 'u <', array_agg(id ORDER BY id) FROM ga WHERE u < '01000000-0000-0000-0000-000000000000'
UNION ALL SELECT 'u >=', array_agg(id ORDER BY id) FROM ga WHERE u >= 'ff000000-0000-0000-0000-000000000000'
UNION ALL SELECT 'u null', array_agg(id ORDER BY id) FROM ga WHERE u IS NULL
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE want AS SELECT * FROM ga_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE t = 'dup';
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE t ^@ 'https://www.site11';
-- A literal prefix then only %: the index answers it exactly (^@, no
-- filter); other patterns keep PostgreSQL's range and the LIKE as filter.
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE t LIKE 'https://www.site3%';
EXPLAIN (COSTS OFF) SELECT vc FROM ga WHERE vc LIKE 'v2%%';
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE t LIKE 'https://www.site3_%';
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE t = ANY (ARRAY['a', 'b']);
EXPLAIN (COSTS OFF) SELECT t FROM ga WHERE t = ANY (ARRAY(SELECT 'https://www.site' || (g % 13) || '.com/p/' || g FROM generate_series(1, 3000, 3) g) || ARRAY['dup', '']) ORDER BY t DESC;
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE u IS NULL;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, cardinality(w.ids) AS n FROM want w JOIN ga_got() g USING (q) ORDER BY w.q;
SET enable_indexscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT id FROM ga WHERE b > '\x00';
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS bitmap_scan_ok FROM want w JOIN ga_got() g USING (q) ORDER BY w.q;
RESET enable_indexscan; RESET enable_bitmapscan;

-- Ordered and index-only scans return the stored values, both directions,
-- NULLs last as btree's.
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT t FROM ga ORDER BY t DESC LIMIT 3;
SELECT left(t, 30) FROM ga ORDER BY t LIMIT 3;
SELECT left(t, 30) FROM ga ORDER BY t DESC LIMIT 3;
SELECT vc FROM ga WHERE vc >= 'v98' ORDER BY vc LIMIT 4;
SELECT b FROM ga WHERE b IS NOT NULL ORDER BY b LIMIT 4;
SELECT b FROM ga ORDER BY b DESC LIMIT 3;
SELECT u FROM ga ORDER BY u LIMIT 2;
SELECT u FROM ga WHERE u IS NOT NULL ORDER BY u DESC LIMIT 2;
BEGIN;
DECLARE c SCROLL CURSOR FOR SELECT t FROM ga WHERE t ^@ 'https://www.site5.com/p/1' ORDER BY t;
FETCH 3 FROM c;
FETCH BACKWARD 2 FROM c;
FETCH LAST FROM c;
FETCH BACKWARD 1 FROM c;
FETCH ABSOLUTE 20 FROM c;
-- A lookup's end is answered on amgettuple's fast path: the cursor then
-- turns back from where it stopped.
DECLARE e SCROLL CURSOR FOR SELECT id, t FROM ga WHERE t = 'https://www.site3.com/p/3';
FETCH ALL FROM e;
FETCH BACKWARD ALL FROM e;
FETCH ALL FROM e;
SELECT count(*) AS dups FROM ga WHERE t = 'dup';
DECLARE d SCROLL CURSOR FOR SELECT t FROM ga WHERE t = 'dup';
MOVE FORWARD ALL IN d;
FETCH BACKWARD 1 FROM d;
MOVE BACKWARD ALL IN d;
FETCH 1 FROM d;
MOVE FORWARD ALL IN d;
FETCH 1 FROM d;
COMMIT;
RESET enable_seqscan; RESET enable_bitmapscan;

-- Inserts that split leaves and inner pages; deletes; VACUUM; REINDEX.
INSERT INTO ga (id, t) SELECT 20000 + g, 'https://www.site' || (g % 5) || '.com/q/' || repeat('x', g % 300) || g FROM generate_series(1, 6000) g;
INSERT INTO ga (id, t) SELECT 30000 + g, 'dup' FROM generate_series(1, 3000) g;
SELECT level, entries, missing_downlinks FROM gpu_art_check('ga_t') ORDER BY level;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM ga WHERE t = 'dup';
SELECT count(*) FROM ga WHERE t ^@ 'https://www.site3.com/q/x';
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*) FROM ga WHERE t ^@ 'https://www.site3.com/q/x';
DELETE FROM ga WHERE id > 20000 AND id % 3 <> 0;
VACUUM ga;
SELECT level, entries FROM gpu_art_check('ga_t') WHERE level = 0;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM ga WHERE t = 'dup';
RESET enable_seqscan; RESET enable_bitmapscan;
REINDEX INDEX ga_t;
SELECT level, entries FROM gpu_art_check('ga_t') WHERE level = 0;

-- Batches: the probe function and gpuindex_search, as = ANY.
SELECT count(*), count(DISTINCT ord) FROM gpu_art_probe('ga_t', ARRAY['dup', '', 'https://www.site4.com/p/30', 'nope']);
SELECT ord, count(*) FROM gpuindex_search('ga_u', '=(uuid,uuid)', ARRAY[md5('1')::uuid, md5('2')::uuid, NULL]) GROUP BY ord ORDER BY ord;

-- Long keys: past 2000 bytes an entry keeps the first 512 and an overflow
-- chain the rest. Keys sharing long prefixes (comparisons read chains),
-- values over 8000 bytes (index-only scans return heap tuples), chains
-- written by the build, by inserts and for split separators, freed by
-- VACUUM and reused.
CREATE TABLE ga_long (id int, t text COLLATE "C") WITH (autovacuum_enabled = off);
INSERT INTO ga_long SELECT g, CASE WHEN g % 4 = 0 THEN 'short' || g
  ELSE repeat(chr(97 + g % 3), 300 + g % 5 * 200) || (g % 50) || repeat('-', g % 9000) || g END
FROM generate_series(1, 1200) g;
CREATE INDEX ga_long_t ON ga_long USING gpu_art (t);
INSERT INTO ga_long SELECT g, CASE WHEN g % 4 = 0 THEN 'short' || g
  ELSE repeat(chr(97 + g % 3), 300 + g % 5 * 200) || (g % 50) || repeat('-', g % 9000) || g END
FROM generate_series(1201, 2400) g;
INSERT INTO ga_long SELECT 5000 + g, repeat('b', 700) || '7' FROM generate_series(1, 300) g;
SELECT level, entries, missing_downlinks FROM gpu_art_check('ga_long_t') ORDER BY level;
CREATE FUNCTION ga_long_got() RETURNS TABLE (q text, ids text) LANGUAGE sql AS $$
SELECT '=' AS q, string_agg(id::text, ',' ORDER BY id) AS ids FROM ga_long WHERE t = repeat('b', 700) || '7'
UNION ALL SELECT '= chain', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t = repeat('c', 700) || '47' || repeat('-', 2297) || '2297'
UNION ALL SELECT '= none', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t = repeat('c', 700) || '47' || repeat('-', 2297) || '2298'
UNION ALL SELECT '<', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t < repeat('a', 700) || '25'
UNION ALL SELECT 'between', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t BETWEEN repeat('b', 900) || '1' AND repeat('b', 900) || '3-'
UNION ALL SELECT '^@', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t ^@ (repeat('a', 1100) || '4')
UNION ALL SELECT 'like', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t LIKE repeat('c', 700) || '47' || repeat('-', 1500) || '%'
UNION ALL SELECT 'any', string_agg(id::text, ',' ORDER BY id) FROM ga_long WHERE t = ANY (ARRAY(SELECT t FROM ga_long WHERE id % 37 = 1))
UNION ALL SELECT 'order', md5(string_agg(id::text || ':' || length(t), ',' ORDER BY t, id)) FROM ga_long
UNION ALL SELECT 'order values', md5(string_agg(t, ',')) FROM (SELECT t FROM ga_long ORDER BY t) x
UNION ALL SELECT 'desc values', md5(string_agg(t, ',')) FROM (SELECT t FROM ga_long WHERE t > repeat('b', 500) ORDER BY t DESC) x
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE ga_long_want AS SELECT * FROM ga_long_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT t FROM ga_long ORDER BY t DESC;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, w.ids IS NOT NULL AS found FROM ga_long_want w JOIN ga_long_got() g USING (q) ORDER BY w.q;
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS bitmap_scan_ok FROM ga_long_want w JOIN ga_long_got() g USING (q) WHERE w.q NOT LIKE '%order%' AND w.q NOT LIKE '%values%' ORDER BY w.q;
RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan; RESET enable_seqscan;
SELECT pg_relation_size('ga_long_t') AS ga_long_size \gset
DELETE FROM ga_long WHERE id % 2 = 0;
VACUUM ga_long;
INSERT INTO ga_long SELECT g, CASE WHEN g % 4 = 0 THEN 'short' || g
  ELSE repeat(chr(97 + g % 3), 300 + g % 5 * 200) || (g % 50) || repeat('-', g % 9000) || g END
FROM generate_series(2, 2400, 2) g;
SELECT pg_relation_size('ga_long_t') <= :ga_long_size * 1.05 AS freed_chains_reused;
SELECT level, entries, missing_downlinks FROM gpu_art_check('ga_long_t') WHERE level = 0;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE ga_long_want2 AS SELECT * FROM ga_long_got();
RESET enable_indexscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS after_vacuum_ok FROM ga_long_want2 w JOIN ga_long_got() g USING (q) ORDER BY w.q;
RESET enable_seqscan; RESET enable_bitmapscan;
REINDEX INDEX ga_long_t;
SELECT level, entries FROM gpu_art_check('ga_long_t') WHERE level = 0;
SELECT count(*) FROM gpu_art_probe('ga_long_t', ARRAY[repeat('b', 700) || '7', repeat('c', 700) || '47' || repeat('-', 2297) || '2297', 'short8']);
DROP TABLE ga_long;
DROP FUNCTION ga_long_got();

-- Leaf prefixes: a leaf stores once what its fences share (up to 256
-- bytes) and each entry the rest. Groups of keys sharing 251 bytes, then
-- keys between and inside them sharing less (the group's prefix itself,
-- shorter runs of 'x'), long keys inside prefixed leaves, NULLs; splits,
-- VACUUM and inserts after it; every answer equal to the sequential scan's.
CREATE TABLE ga_pre (id int, t text COLLATE "C") WITH (autovacuum_enabled = off);
INSERT INTO ga_pre SELECT g, chr(97 + g % 20) || repeat('x', 250) || lpad(g::text, 6, '0') FROM generate_series(1, 12000) g;
CREATE INDEX ga_pre_t ON ga_pre USING gpu_art (t);
INSERT INTO ga_pre SELECT 20000 + g, CASE g % 5
  WHEN 0 THEN chr(97 + g % 20) || repeat('x', g % 253) || 'a' || g
  WHEN 1 THEN chr(97 + g % 20) || repeat('x', 250)
  WHEN 2 THEN chr(97 + g % 20) || repeat('x', 250) || repeat('y', 2100 + g) || g
  WHEN 3 THEN NULL
  ELSE chr(97 + g % 20) || repeat('x', 250) || lpad((g * 7 % 12000)::text, 6, '0') || 'z' END
FROM generate_series(1, 6000) g;
SELECT level, entries, missing_downlinks FROM gpu_art_check('ga_pre_t') ORDER BY level;
CREATE FUNCTION ga_pre_got() RETURNS TABLE (q text, ids text) LANGUAGE sql AS $$
SELECT '=' AS q, string_agg(id::text, ',' ORDER BY id) AS ids FROM ga_pre WHERE t = 'c' || repeat('x', 250) || '000042'
UNION ALL SELECT '= prefix itself', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t = 'b' || repeat('x', 250)
UNION ALL SELECT '= shorter', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t = 'a' || repeat('x', 229) || 'a' || 2000
UNION ALL SELECT '= long', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t = 'h' || repeat('x', 250) || repeat('y', 2107) || 7
UNION ALL SELECT '= none', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t = 'c' || repeat('x', 251)
UNION ALL SELECT 'between', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t BETWEEN 'f' || repeat('x', 100) AND 'f' || repeat('x', 250) || '0005'
UNION ALL SELECT '^@', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t ^@ ('g' || repeat('x', 250) || '0011')
UNION ALL SELECT '^@ short', count(*)::text FROM ga_pre WHERE t ^@ ('g' || repeat('x', 30))
UNION ALL SELECT 'any', string_agg(id::text, ',' ORDER BY id) FROM ga_pre WHERE t = ANY (ARRAY(SELECT t FROM ga_pre WHERE id % 37 = 1) || ARRAY['b' || repeat('x', 252), 'q', ''])
UNION ALL SELECT 'null', count(*)::text FROM ga_pre WHERE t IS NULL
UNION ALL SELECT 'order', md5(string_agg(id::text, ',' ORDER BY t, id)) FROM ga_pre
UNION ALL SELECT 'order values', md5(string_agg(t, ',')) FROM (SELECT t FROM ga_pre ORDER BY t) x
UNION ALL SELECT 'desc values', md5(string_agg(t, ',')) FROM (SELECT t FROM ga_pre WHERE t > 'j' ORDER BY t DESC) x
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE ga_pre_want AS SELECT * FROM ga_pre_got();
RESET enable_indexscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, w.ids IS NOT NULL AS found FROM ga_pre_want w JOIN ga_pre_got() g USING (q) ORDER BY w.q;
SELECT count(*) = (SELECT count(*) FROM ga_pre WHERE t IN (SELECT t FROM ga_pre WHERE id % 37 = 1)) AS probe_ok
FROM gpu_art_probe('ga_pre_t', ARRAY(SELECT DISTINCT t FROM ga_pre WHERE id % 37 = 1 AND t IS NOT NULL)) p
JOIN ga_pre x ON x.ctid = p.ctid;
RESET enable_seqscan; RESET enable_bitmapscan;
DELETE FROM ga_pre WHERE id % 3 = 0;
VACUUM ga_pre;
INSERT INTO ga_pre SELECT 40000 + g, chr(97 + g % 20) || repeat('x', 150 + g % 100) || 'b' || g FROM generate_series(1, 4000) g;
SELECT level, entries, missing_downlinks FROM gpu_art_check('ga_pre_t') WHERE level = 0;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE ga_pre_want2 AS SELECT * FROM ga_pre_got();
RESET enable_indexscan; RESET enable_indexonlyscan;
SET enable_seqscan = off;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS after_vacuum_ok FROM ga_pre_want2 w JOIN ga_pre_got() g USING (q) ORDER BY w.q;
RESET enable_seqscan; RESET enable_bitmapscan;
DROP TABLE ga_pre;
DROP FUNCTION ga_pre_got();

-- A run of one key fills its pages (inserts append to the run's end and
-- split it nbtree's single-value way), whatever keys lie around it.
CREATE TABLE ga_dup (k text COLLATE "C");
INSERT INTO ga_dup SELECT 'k' || g FROM generate_series(1, 2000) g;
CREATE INDEX ga_dup_k ON ga_dup USING gpu_art (k);
INSERT INTO ga_dup SELECT 'k5' FROM generate_series(1, 100000) g;
INSERT INTO ga_dup SELECT NULL FROM generate_series(1, 20000) g;
SELECT pages, entries, pages < (entries * 16 / 8144 * 100 / 85) AS compact FROM gpu_art_check('ga_dup_k') WHERE level = 0;
SELECT count(*) FROM ga_dup WHERE k = 'k5';
SELECT count(*) FROM ga_dup WHERE k >= 'k49' AND k <= 'k51';
DROP TABLE ga_dup;

-- Errors.
CREATE TABLE ga_err (t text COLLATE "POSIX", d text, n numeric);
CREATE INDEX ON ga_err USING gpu_art (t);
CREATE INDEX ON ga_err USING gpu_art (d COLLATE "C");
CREATE INDEX ON ga_err USING gpu_art (n);
CREATE INDEX ON ga_err USING gpu_art (t, d);
SELECT * FROM gpu_art_probe('ga_t', ARRAY[1]);
SELECT * FROM gpuindex_search('ga_t', '<(text,text)', ARRAY['a']);
DROP TABLE ga_err;
DROP TABLE ga;
DROP FUNCTION ga_got();

-- gpu_spatial: every operator through every scan kind equals the
-- sequential scan; ORDER BY <-> in exact distance order; inserts (the
-- delta), VACUUM, REINDEX; the batch functions; errors.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

-- A grid with duplicates (every point twice), points on the box borders
-- used below, a dense cluster, and the odd ones: NaN, infinities, NULL.
CREATE TABLE gs (id int, p point) WITH (autovacuum_enabled = off);
INSERT INTO gs SELECT g, point((g % 50) * 2, (g / 50) * 2) FROM generate_series(0, 2499) g;
INSERT INTO gs SELECT 10000 + g, point((g % 50) * 2, (g / 50) * 2) FROM generate_series(0, 2499, 7) g;
INSERT INTO gs SELECT 20000 + g, point(33 + (g % 37) * 0.001, 61 + (g % 41) * 0.001) FROM generate_series(1, 3000) g;
INSERT INTO gs VALUES (30001, point('NaN', 1)), (30002, point('Infinity', 5)), (30003, point(5, '-Infinity')),
  (30004, NULL), (30005, point(10.0000001, 20)), (30006, point('NaN', 'NaN'));
CREATE INDEX gs_p ON gs USING gpu_spatial (p) WITH (leaf_capacity = 64);
SELECT nodes, leaves, tree_entries, chain_pages, chain_entries, largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('gs_p');
SELECT amvalidate(oid) AS valid, opcname FROM pg_opclass WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'gpu_spatial');

CREATE FUNCTION gs_got() RETURNS TABLE (q text, ids int[]) LANGUAGE sql AS $$
SELECT 'box' AS q, array_agg(id ORDER BY id) AS ids FROM gs WHERE p <@ box '(10,20),(14,24)'
UNION ALL SELECT 'box flat', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(10,0),(10,100)'
UNION ALL SELECT 'box point', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(10,20),(10,20)'
UNION ALL SELECT 'box cluster', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(33.01,61.01),(33.02,61.03)'
UNION ALL SELECT 'box outside', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(500,500),(600,600)'
UNION ALL SELECT 'box inf', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(0,0),(Infinity,10)'
UNION ALL SELECT 'box nan', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(NaN,0),(10,10)'
UNION ALL SELECT 'box commuted', array_agg(id ORDER BY id) FROM gs WHERE box '(0,0),(4,4)' @> p
UNION ALL SELECT 'circle', array_agg(id ORDER BY id) FROM gs WHERE p <@ circle '((50,50),4)'
UNION ALL SELECT 'circle border', array_agg(id ORDER BY id) FROM gs WHERE p <@ circle '((10,20),2)'
UNION ALL SELECT 'circle zero', array_agg(id ORDER BY id) FROM gs WHERE p <@ circle '((10,20),0)'
UNION ALL SELECT 'circle cluster', array_agg(id ORDER BY id) FROM gs WHERE p <@ circle '((33.02,61.02),0.005)'
UNION ALL SELECT 'same', array_agg(id ORDER BY id) FROM gs WHERE p ~= point '(10,20)'
UNION ALL SELECT 'same nan', array_agg(id ORDER BY id) FROM gs WHERE p ~= point '(NaN,1)'
UNION ALL SELECT 'same inf', array_agg(id ORDER BY id) FROM gs WHERE p ~= point '(Infinity,5)'
UNION ALL SELECT 'box and circle', array_agg(id ORDER BY id) FROM gs WHERE p <@ box '(0,0),(20,20)' AND p <@ circle '((0,0),10)'
$$;
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
CREATE TEMP TABLE want AS SELECT * FROM gs_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gs WHERE p <@ box '(10,20),(14,24)';
EXPLAIN (COSTS OFF) SELECT id FROM gs WHERE p <@ circle '((50,50),4)';
EXPLAIN (COSTS OFF) SELECT id FROM gs WHERE p ~= point '(10,20)';
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS index_scan_ok, cardinality(w.ids) AS n FROM want w JOIN gs_got() g USING (q) ORDER BY w.q;
SET enable_indexscan = off; SET enable_bitmapscan = on;
EXPLAIN (COSTS OFF) SELECT id FROM gs WHERE p <@ box '(10,20),(14,24)';
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS bitmap_scan_ok FROM want w JOIN gs_got() g USING (q) ORDER BY w.q;
RESET enable_indexscan; RESET enable_bitmapscan;
-- index-only scans return the stored point
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT p FROM gs WHERE p <@ box '(10,20),(10.1,20.1)';
SELECT p FROM gs WHERE p <@ box '(10,20),(10.1,20.1)' ORDER BY p[0], p[1];

-- Nearest neighbours: exact distance order, ties in any order (so compare
-- the distances), then the non-finite distances, then NULL.
EXPLAIN (COSTS OFF) SELECT id FROM gs ORDER BY p <-> point '(10.3,20.4)' LIMIT 5;
SELECT p <-> point '(10.3,20.4)' AS d FROM gs ORDER BY p <-> point '(10.3,20.4)' LIMIT 6;
SELECT * FROM (SELECT id, p <-> point '(33.0205,61.0205)' AS d FROM gs WHERE p <@ box '(33.02,61.02),(33.021,61.021)'
  ORDER BY p <-> point '(33.0205,61.0205)' LIMIT 20) s ORDER BY d, id;
SELECT * FROM (SELECT id, p <-> point '(200,200)' AS d FROM gs ORDER BY p <-> point '(200,200)' OFFSET 5859) s ORDER BY d, id;
EXPLAIN (COSTS OFF) SELECT p FROM gs ORDER BY p <-> point '(51,49)';
CREATE TEMP TABLE knn_idx AS SELECT row_number() OVER () AS r, p <-> point '(51,49)' AS d FROM (SELECT p FROM gs ORDER BY p <-> point '(51,49)') s;
RESET enable_seqscan; RESET enable_bitmapscan;
SET enable_indexscan = off; SET enable_bitmapscan = off;
CREATE TEMP TABLE knn_seq AS SELECT row_number() OVER () AS r, p <-> point '(51,49)' AS d FROM (SELECT p FROM gs ORDER BY p <-> point '(51,49)') s;
RESET enable_indexscan; RESET enable_bitmapscan;
SELECT count(*) AS rows, count(*) FILTER (WHERE a.d IS DISTINCT FROM b.d) AS out_of_order FROM knn_idx a JOIN knn_seq b USING (r);

-- Inserts go to the delta and are found at once; VACUUM removes dead
-- entries; REINDEX folds everything into the tree.
INSERT INTO gs SELECT 40000 + g, point(10 + g * 0.001, 20) FROM generate_series(1, 1000) g;
INSERT INTO gs VALUES (41001, NULL), (41002, point('NaN', 3));
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM gs WHERE p <@ box '(10,20),(10.5,20)';
SELECT id, p <-> point '(10.0004,20)' AS d FROM gs ORDER BY p <-> point '(10.0004,20)', id LIMIT 3;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT count(*) FROM gs WHERE p <@ box '(10,20),(10.5,20)';
SELECT nodes, leaves, tree_entries, chain_pages, chain_entries, largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('gs_p');
DELETE FROM gs WHERE id % 3 = 0;
VACUUM gs;
SELECT nodes, leaves, tree_entries, chain_pages, chain_entries, largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('gs_p');
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
DROP TABLE want; CREATE TEMP TABLE want AS SELECT * FROM gs_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS after_vacuum_ok, cardinality(w.ids) AS n FROM want w JOIN gs_got() g USING (q) ORDER BY w.q;
SELECT count(*) FROM gs WHERE p <@ box '(10,20),(10.5,20)';
REINDEX INDEX gs_p;
SELECT nodes, leaves, tree_entries, chain_pages, chain_entries, largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('gs_p');
SELECT count(*) FROM gs WHERE p <@ box '(10,20),(10.5,20)';
RESET enable_seqscan; RESET enable_bitmapscan;

-- Merges: past delta_limit pages an insert folds the delta into the tree
-- (G-PICS bulk update: leaves gain points in place or split); so do
-- VACUUM and gpu_spatial_merge().
ALTER INDEX gs_p SET (delta_limit = 1);
INSERT INTO gs SELECT 50000 + g, point(60 + (g % 40) * 0.01, 30 + (g / 40) * 0.01) FROM generate_series(1, 2000) g;
INSERT INTO gs VALUES (52001, point(-500, 900)), (52002, point(10, 20));
SELECT leaves > 84 AS split, chain_pages < 5 AS merged FROM gpu_spatial_check('gs_p');
SELECT gpu_spatial_merge('gs_p');
SELECT nodes, leaves, tree_entries, chain_pages, chain_entries, largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('gs_p');
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
DROP TABLE want; CREATE TEMP TABLE want AS SELECT * FROM gs_got();
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT w.q, w.ids IS NOT DISTINCT FROM g.ids AS after_merges_ok, cardinality(w.ids) AS n FROM want w JOIN gs_got() g USING (q) ORDER BY w.q;
SELECT id, p FROM gs WHERE p <@ box '(-1000,800),(0,1000)';
RESET enable_seqscan; RESET enable_bitmapscan;

-- Batch functions: one call, many queries, each row tagged with its
-- query's position; the same rows as one query at a time.
SELECT r.ord, count(*) FROM gpu_spatial_range('gs_p', ARRAY[box '(10,20),(14,24)', NULL, box '(500,500),(600,600)', box '(33.01,61.01),(33.02,61.03)']) r GROUP BY 1 ORDER BY 1;
SELECT b.ord, count(*) FROM unnest(ARRAY[box '(10,20),(14,24)', NULL, box '(500,500),(600,600)', box '(33.01,61.01),(33.02,61.03)']) WITH ORDINALITY b(b, ord)
  JOIN gs ON gs.p <@ b.b GROUP BY 1 ORDER BY 1;
SELECT r.ord, count(*) FROM gpu_spatial_within('gs_p', ARRAY[circle '((50,50),4)', circle '((10,20),2)']) r GROUP BY 1 ORDER BY 1;
SELECT r.ord, count(*) FROM gpu_spatial_within('gs_p', ARRAY[point '(50,50)', point '(10,20)'], 2) r GROUP BY 1 ORDER BY 1;
SELECT r.ord, t.id FROM gpu_spatial_range('gs_p', ARRAY[box '(10,20),(10.002,20)']) r JOIN gs t ON t.ctid = r.ctid ORDER BY 1, 2;
SELECT k.ord, round(k.distance::numeric, 6) AS d FROM gpu_spatial_knn('gs_p', ARRAY[point '(10.3,20.4)', point '(51,49)'], 3) k ORDER BY 1, 2;
SELECT count(*) FROM gpu_spatial_range('gs_p', ARRAY[]::box[]);
SELECT count(*) FROM gpu_spatial_knn('gs_p', ARRAY[]::point[], 5);
CREATE TABLE gq (qid int, c point, b box, ci circle);
INSERT INTO gq SELECT g, point(g * 7 % 100, g * 13 % 100), box(point(g * 7 % 100, g * 13 % 100), point(g * 7 % 100 + 3, g * 13 % 100 + 3)),
  circle(point(g * 7 % 100, g * 13 % 100), 3) FROM generate_series(1, 40) g;
INSERT INTO gq VALUES (41, NULL, NULL, NULL);
SELECT (SELECT count(*) FROM gpu_spatial_join('gs_p', 'gq', 'c', within => 3, batch => 7)) AS join_points,
       (SELECT count(*) FROM gq JOIN gs ON gs.p <@ circle(gq.c, 3)) AS want;
SELECT (SELECT count(*) FROM gpu_spatial_join('gs_p', 'gq', 'b')) AS join_boxes,
       (SELECT count(*) FROM gq JOIN gs ON gs.p <@ gq.b) AS want;
SELECT (SELECT count(*) FROM gpu_spatial_join('gs_p', 'gq', 'ci')) AS join_circles,
       (SELECT count(*) FROM gq JOIN gs ON gs.p <@ gq.ci) AS want;

-- Errors.
SELECT * FROM gpu_spatial_knn('gs_p', ARRAY[point '(1,1)'], 0);
SELECT * FROM gpu_spatial_knn('gs_p', ARRAY[point '(NaN,1)'], 3);
SELECT * FROM gpu_spatial_within('gs_p', ARRAY[point '(1,1)'], -1);
SELECT * FROM gpu_spatial_within('gs_p', ARRAY[point '(1,1)'], 'NaN');
SELECT * FROM gpu_spatial_range('gs', ARRAY[box '(1,1),(2,2)']);
SELECT * FROM gpu_spatial_join('gs_p', 'gq', 'c');
SELECT * FROM gpu_spatial_join('gs_p', 'gq', 'b', within => 1);
SELECT * FROM gpu_spatial_join('gs_p', 'gq', 'qid', within => 1);
SELECT * FROM gpu_spatial_join('gs_p', 'gq', 'nope', within => 1);
SELECT box '(1,1),(2)';
CREATE INDEX ON gs USING gpu_spatial ((p[0]));
CREATE INDEX ON gq USING gpu_spatial (b);
CREATE INDEX ON gs USING gpu_spatial (p) WITH (leaf_capacity = 1);
CREATE TABLE gsx (p point, EXCLUDE USING gpu_spatial (p WITH ~=));
INSERT INTO gsx VALUES (point(1,1));

DROP TABLE gs, gq, gsx;
DROP FUNCTION gs_got();

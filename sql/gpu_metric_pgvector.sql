-- gpu_metric on pgvector's vector, through the companion extension
-- gpuindex_pgvector: ORDER BY pgvector's own <->, <+>, <=> through the
-- index equals the sequential scan (the index returns lower bounds of
-- pgvector's float4 distances and the executor rechecks); balls; batch
-- functions; inserts, deletes, VACUUM; errors. Where pgvector is not
-- installed, only the ERROR of the companion without it
-- (expected/gpu_metric_pgvector_1.out).
SET client_min_messages = warning;
SET gpuindex.device = cpu;
SELECT NOT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector') AS no_pgvector \gset
\if :no_pgvector
CREATE EXTENSION gpuindex_pgvector;
\quit
\endif
CREATE EXTENSION vector;
CREATE EXTENSION gpuindex_pgvector;

-- 3,000 vectors of 12 dimensions around 30 centres, exact duplicates, NULLs.
SELECT setseed(0.25);
CREATE TABLE pv (id int, e vector(12));
CREATE TEMP TABLE centre AS SELECT c, ARRAY(SELECT random() * 20 - 10 FROM generate_series(1, 12) WHERE c > 0) AS x FROM generate_series(1, 30) c;
INSERT INTO pv SELECT g, ARRAY(SELECT x[i] + (random() - 0.5) FROM generate_series(1, 12) i)::vector
  FROM generate_series(1, 2900) g JOIN centre ON c = g % 30 + 1;
INSERT INTO pv SELECT 3000 + id, e FROM pv WHERE id <= 100;
INSERT INTO pv VALUES (-1, NULL), (-2, NULL);
CREATE INDEX pv_l2 ON pv USING gpu_metric (e) WITH (node_capacity = 8, delta_limit = 1);
CREATE INDEX pv_l1 ON pv USING gpu_metric (e vector_l1_ops);
CREATE INDEX pv_cos ON pv USING gpu_metric (e vector_cosine_ops);

EXPLAIN (COSTS OFF) SELECT id FROM pv ORDER BY e <-> '[1,2,3,4,5,6,7,8,9,10,11,12]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM pv ORDER BY e <+> '[1,2,3,4,5,6,7,8,9,10,11,12]' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM pv ORDER BY e <=> '[1,2,3,4,5,6,7,8,9,10,11,12]' LIMIT 5;

-- Through the index, pgvector's distance at every rank equals the
-- sequential scan's, for every row (NULLs last).
CREATE FUNCTION pv_ranks(tab text, op text, q vector, lim int) RETURNS TABLE (through_index bigint, differ bigint) AS $$
DECLARE a float8[]; b float8[];
BEGIN
  SET LOCAL enable_seqscan = off;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT e %s %L::vector AS d FROM %I ORDER BY e %s %L::vector LIMIT %s) x', op, q, tab, op, q, lim) INTO a;
  SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT e %s %L::vector AS d FROM %I ORDER BY e %s %L::vector LIMIT %s) x', op, q, tab, op, q, lim) INTO b;
  RETURN QUERY SELECT cardinality(a)::bigint, (SELECT count(*) FROM unnest(a, b) u(x, y) WHERE x IS DISTINCT FROM y);
END $$ LANGUAGE plpgsql;
CREATE TEMP TABLE queries AS
  SELECT n, (SELECT e FROM pv WHERE id = n * 97) AS q FROM generate_series(1, 4) n
  UNION ALL SELECT 5, ARRAY(SELECT random() * 40 - 20 FROM generate_series(1, 12))::vector;
SELECT op, n, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), queries, pv_ranks('pv', op, q, 3100) r ORDER BY 1, 2;
-- A tree of 12,000 rows in 48 dimensions: L2 scans search its copy in
-- memory (the bounded brute force), the others its pages.
CREATE TABLE pv_wide AS SELECT g AS id, ARRAY(SELECT random() FROM generate_series(1, 48) WHERE g > 0)::vector AS e FROM generate_series(1, 12000) g;
CREATE INDEX ON pv_wide USING gpu_metric (e);
CREATE INDEX ON pv_wide USING gpu_metric (e vector_cosine_ops);
SELECT op, r.* FROM (VALUES ('<->'), ('<=>')) o(op), pv_ranks('pv_wide', op, (SELECT e FROM pv_wide WHERE id = 7), 300) r ORDER BY 1;
DROP TABLE pv_wide;

-- Inserts (the delta), deletes, VACUUM (which rebuilds the tree).
INSERT INTO pv SELECT 5000 + g, ARRAY(SELECT (g % 7) + random() FROM generate_series(1, 12))::vector FROM generate_series(1, 300) g;
DELETE FROM pv WHERE id % 5 = 0;
SELECT op, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), queries, pv_ranks('pv', op, q, 3500) r WHERE n = 5 ORDER BY 1;
VACUUM pv;
SELECT op, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), queries, pv_ranks('pv', op, q, 3500) r WHERE n = 2 ORDER BY 1;
SELECT c.* FROM (VALUES ('pv_l2'), ('pv_l1'), ('pv_cos')) i(name), gpu_metric_check(i.name::regclass) c;

-- Balls (centres as real[]: pgvector casts vector to real[]), through the
-- index and not; batch functions on vector[] against LATERAL queries (the
-- batch's distance is the index's, in float8: compared rounded).
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ l2_ball(q::real[], 2.5);
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ l1_ball(q::real[], 6);
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ cosine_ball(q::real[], 0.01);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM pv WHERE e <@ l2_ball('{1,2,3,4,5,6,7,8,9,10,11,12}', 2.5);
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ l2_ball(q::real[], 2.5);
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ l1_ball(q::real[], 6);
SELECT count(*), sum(id) FROM pv, queries WHERE n = 1 AND e <@ cosine_ball(q::real[], 0.01);
RESET enable_seqscan;
CREATE TEMP TABLE want AS
  SELECT n AS ord, x.ctid AS tid, round((e <-> q)::numeric, 4) AS d FROM queries, LATERAL (SELECT ctid, e FROM pv ORDER BY e <-> q, ctid LIMIT 7) x;
CREATE TEMP TABLE got AS
  SELECT k.ord, k.ctid AS tid, round(k.distance::numeric, 4) AS d FROM gpu_metric_knn_vector('pv_l2', ARRAY(SELECT q FROM queries ORDER BY n), 7) k;
SELECT (SELECT count(*) FROM got) AS rows, (SELECT count(*) FROM (TABLE got EXCEPT ALL TABLE want) e) AS extra,
  (SELECT count(*) FROM (TABLE want EXCEPT ALL TABLE got) e) AS missing;
SELECT count(*) FROM gpu_metric_within_vector('pv_l1', ARRAY(SELECT q FROM queries WHERE n = 1), 6);
SELECT ord, count(*) FROM gpuindex_nearest('pv_cos', '<=>(vector,vector)', ARRAY(SELECT q FROM queries ORDER BY n), 3) GROUP BY ord ORDER BY ord;
SELECT ord, count(*) FROM gpuindex_search('pv_l2', '<@(vector,l2_ball)', ARRAY[l2_ball('{1,2,3,4,5,6,7,8,9,10,11,12}', 30)]) GROUP BY ord;
-- The batched join leaves LATERAL top-k by pgvector's operators to index
-- scans, which recheck pgvector's distances (the batches rank by the
-- index's float8 distance): with nested loops disabled, the join would
-- be taken where offered.
SET enable_nestloop = off;
EXPLAIN (COSTS OFF) SELECT n, x.id FROM queries CROSS JOIN LATERAL (SELECT id FROM pv ORDER BY e <-> q LIMIT 3) x;
CREATE TEMP TABLE rq AS SELECT n, q::real[] AS q FROM queries;
CREATE TABLE pr AS SELECT id, e::real[] AS r FROM pv;
CREATE INDEX ON pr USING gpu_metric (r);
ANALYZE pr;
EXPLAIN (COSTS OFF) SELECT n, x.id FROM rq CROSS JOIN LATERAL (SELECT id FROM pr ORDER BY r <-> q LIMIT 3) x;
RESET enable_nestloop;

-- Errors.
INSERT INTO pv VALUES (1, '[1,2,3]');
INSERT INTO pv VALUES (1, '[0,0,0,0,0,0,0,0,0,0,0,0]');
INSERT INTO pv VALUES (1, '[1e-20,0,0,0,0,0,0,0,0,0,0,0]');
SELECT * FROM gpu_metric_knn_vector('pv_l2', ARRAY['[1,2,3]']::vector[], 1);
SELECT * FROM gpu_metric_knn('pv_l2', '{1,2,3,4,5,6,7,8,9,10,11,12}', 1);
SET enable_seqscan = off;
SELECT id FROM pv ORDER BY e <-> '[1,2,3]' LIMIT 1;
RESET enable_seqscan;
DROP TABLE pv, pr, queries, centre, want, got, rq;
DROP FUNCTION pv_ranks;
DROP EXTENSION gpuindex_pgvector;
DROP EXTENSION vector;

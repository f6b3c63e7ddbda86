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
CREATE TABLE pv (id int, e vector(12)) WITH (autovacuum_enabled = off);
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
  -- (SET LOCAL lasts to the end of the statement that calls this, which may
  -- call it again: the index is allowed back each time.)
  SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = on;
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
-- The batched join takes LATERAL top-k by pgvector's operators too: it
-- ranks the candidates by pgvector's own distance and widens until no row
-- left out can come first. Same distances at every rank as without it.
EXPLAIN (COSTS OFF) SELECT n, x.id FROM queries CROSS JOIN LATERAL (SELECT id FROM pv ORDER BY e <-> q LIMIT 3) x;
CREATE FUNCTION pv_lateral(op text, lim int) RETURNS TABLE (n int, ds float8[]) AS $$
BEGIN
  RETURN QUERY EXECUTE format('SELECT n, array_agg(d ORDER BY d) FROM queries CROSS JOIN LATERAL
    (SELECT e %s q AS d FROM pv ORDER BY e %s q LIMIT %s) x GROUP BY n', op, op, lim);
END $$ LANGUAGE plpgsql;
EXPLAIN (COSTS OFF) SELECT n, array_agg(d ORDER BY d) FROM queries CROSS JOIN LATERAL
  (SELECT e <=> q AS d FROM pv ORDER BY e <=> q LIMIT 200) x GROUP BY n;
CREATE TEMP TABLE joined AS SELECT op, lim, j.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), (VALUES (1), (10), (200)) l(lim), pv_lateral(op, lim) j;
SET gpuindex.enable_join = off;
SELECT op, lim, count(*) AS queries, count(*) FILTER (WHERE j.ds IS DISTINCT FROM p.ds) AS differ
  FROM joined j JOIN LATERAL pv_lateral(op, lim) p USING (n) GROUP BY op, lim ORDER BY op, lim;
RESET gpuindex.enable_join;
DROP FUNCTION pv_lateral;

-- Errors.
INSERT INTO pv VALUES (1, '[1,2,3]');
INSERT INTO pv VALUES (1, '[0,0,0,0,0,0,0,0,0,0,0,0]');
INSERT INTO pv VALUES (1, '[1e-20,0,0,0,0,0,0,0,0,0,0,0]');
SELECT * FROM gpu_metric_knn_vector('pv_l2', ARRAY['[1,2,3]']::vector[], 1);
SELECT * FROM gpu_metric_knn('pv_l2', '{1,2,3,4,5,6,7,8,9,10,11,12}', 1);
SET enable_seqscan = off;
SELECT id FROM pv ORDER BY e <-> '[1,2,3]' LIMIT 1;
RESET enable_seqscan;
DROP TABLE pv, queries, centre, want, got, joined;
DROP FUNCTION pv_ranks;
DROP EXTENSION gpuindex_pgvector;
DROP EXTENSION vector;

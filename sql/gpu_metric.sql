-- gpu_metric: exact ORDER BY distance through the index, for each
-- operator class; equal to the sequential scan's order; inserts, deletes,
-- VACUUM's rebuild; errors.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

CREATE TABLE gm (id int, v real[]) WITH (autovacuum_enabled = off);
INSERT INTO gm SELECT g, ARRAY[(g * 7919) % 101, (g * 104729) % 97, g % 7 + 1]::real[]
  FROM generate_series(1, 3000) g;
INSERT INTO gm VALUES (-1, NULL), (-2, NULL);
CREATE INDEX gm_l2 ON gm USING gpu_metric (v) WITH (node_capacity = 4, delta_limit = 1);
CREATE INDEX gm_l1 ON gm USING gpu_metric (v real_l1_ops);
CREATE INDEX gm_cos ON gm USING gpu_metric (v real_cosine_ops);

-- The distances.
SELECT '{1,2,3}'::real[] <-> '{4,6,3}' AS l2, '{1,2,3}'::real[] <+> '{4,6,3}' AS l1,
  round(('{1,0}'::real[] <=> '{1,1}')::numeric, 12) AS cosine;

EXPLAIN (COSTS OFF) SELECT id FROM gm ORDER BY v <-> '{50,50,3}' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM gm ORDER BY v <+> '{50,50,3}' LIMIT 5;
EXPLAIN (COSTS OFF) SELECT id FROM gm ORDER BY v <=> '{50,50,3}' LIMIT 5;

-- Index order equals the sequential scan's: same distance at every rank.
CREATE FUNCTION gm_ranks(op text, q text, lim int) RETURNS TABLE (through_index bigint, differ bigint) AS $$
DECLARE a float8[]; b float8[];
BEGIN
  -- (SET LOCAL lasts to the end of the statement that calls this, which may
  -- call it again: the index is allowed back each time.)
  SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = on;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s %L::real[] AS d FROM gm ORDER BY v %s %L::real[] LIMIT %s) x', op, q, op, q, lim) INTO a;
  SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s %L::real[] AS d FROM gm ORDER BY v %s %L::real[] LIMIT %s) x', op, q, op, q, lim) INTO b;
  RETURN QUERY SELECT cardinality(a)::bigint, (SELECT count(*) FROM unnest(a, b) u(x, y) WHERE x IS DISTINCT FROM y);
END $$ LANGUAGE plpgsql;

SELECT op, q, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op),
  (VALUES ('{50,50,3}'), ('{0,0,1}'), ('{100,-5,9}')) qs(q), gm_ranks(op, q, 3100) r ORDER BY 1, 2;

-- Nearest rows and their distances; NULL rows come last.
SELECT id, v, round((v <-> '{10,10,2}')::numeric, 6) AS d FROM gm ORDER BY v <-> '{10,10,2}' LIMIT 4;
SELECT id, v <-> '{10,10,2}' AS d FROM gm ORDER BY v <-> '{10,10,2}' OFFSET 2998;

-- Inserts (the delta), deletes, VACUUM (which rebuilds the tree).
INSERT INTO gm SELECT 5000 + g, ARRAY[g % 50, g % 40, 2]::real[] FROM generate_series(1, 400) g;
DELETE FROM gm WHERE id % 4 = 0;
SELECT op, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), gm_ranks(op, '{25,20,2}', 3000) r ORDER BY 1;
VACUUM gm;
SELECT op, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), gm_ranks(op, '{25,20,2}', 3000) r ORDER BY 1;
SELECT kind, generation > 1 AS rebuilt FROM gpuindex_cached_images() WHERE index = 'gm_l2'::regclass;
SELECT c.* FROM (VALUES ('gm_l2'), ('gm_l1'), ('gm_cos')) i(name), gpu_metric_check(i.name::regclass) c;

-- Batch functions: each query's rows (ord, ctid, distance) equal a LATERAL
-- query's; kNN ties broken by ctid.
CREATE TEMP TABLE qs AS SELECT ARRAY[[50,50,3],[0,0,1],[10,10,2],[25,20,2]]::real[] AS a;
CREATE TEMP TABLE want AS
  SELECT 'knn' AS f, i AS ord, n.ctid AS tid, n.d FROM qs, generate_subscripts(qs.a, 1) i,
    LATERAL (SELECT ctid, v <-> ARRAY(SELECT unnest(qs.a[i:i][1:3]))::real[] AS d FROM gm
             ORDER BY 2, 1 LIMIT 7) n
  UNION ALL
  SELECT 'within', i, gm.ctid, v <-> ARRAY(SELECT unnest(qs.a[i:i][1:3]))::real[] FROM qs, generate_subscripts(qs.a, 1) i, gm
    WHERE v <-> ARRAY(SELECT unnest(qs.a[i:i][1:3]))::real[] <= 4.5;
CREATE TEMP TABLE got AS
  SELECT 'knn' AS f, k.ord, k.ctid AS tid, k.distance AS d FROM qs, gpu_metric_knn('gm_l2', qs.a, 7) k
  UNION ALL
  SELECT 'within', w.ord, w.ctid, w.distance FROM qs, gpu_metric_within('gm_l2', qs.a, 4.5) w;
SELECT f, count(*) AS rows,
  (SELECT count(*) FROM ((SELECT ord, tid, d FROM got g WHERE g.f = w.f) EXCEPT ALL (SELECT ord, tid, d FROM want x WHERE x.f = w.f)) e) AS extra,
  (SELECT count(*) FROM ((SELECT ord, tid, d FROM want x WHERE x.f = w.f) EXCEPT ALL (SELECT ord, tid, d FROM got g WHERE g.f = w.f)) e) AS missing
FROM want w GROUP BY f ORDER BY f;
-- One query as a one-dimensional array; cosine and L1 indexes.
SELECT ord, distance FROM gpu_metric_knn('gm_l1', '{25,20,2}', 3);
SELECT count(*) FROM gpu_metric_within('gm_cos', '{25,20,2}', 0.001);
SELECT count(*) FROM gm WHERE v <=> '{25,20,2}' <= 0.001;
SELECT * FROM gpu_metric_knn('gm_l2', '{1,2}', 3);
SELECT * FROM gpu_metric_knn('gm_l2', '{1,2,3}', 0);
SELECT * FROM gpu_metric_within('gm_l2', '{1,2,3}', -1);
SELECT * FROM gpu_metric_knn('gm_l2', '{{{1,2,3}}}', 1);
DROP TABLE qs, want, got;

-- Balls: WHERE v <@ l2_ball(q, r) (l1_ball, cosine_ball) through each
-- index, plain and bitmap, equal the sequential scan; ANDed balls; a ball
-- with ORDER BY; batches through gpuindex_search and gpuindex_nearest.
CREATE TEMP TABLE ball_want AS
  SELECT b, count(*) AS n, sum(id) AS ids FROM (VALUES ('l2'), ('l1'), ('cosine')) t(b), gm
  WHERE CASE b WHEN 'l2' THEN v <@ l2_ball('{25,20,2}', 3) WHEN 'l1' THEN v <@ l1_ball('{25,20,2}', 4)
               ELSE v <@ cosine_ball('{25,20,2}', 0.001) END
  GROUP BY b;
SELECT * FROM ball_want ORDER BY b;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gm WHERE v <@ l2_ball('{25,20,2}', 3);
SELECT 'l2' AS b, count(*), sum(id) FROM gm WHERE v <@ l2_ball('{25,20,2}', 3)
UNION ALL SELECT 'l1', count(*), sum(id) FROM gm WHERE v <@ l1_ball('{25,20,2}', 4)
UNION ALL SELECT 'cosine', count(*), sum(id) FROM gm WHERE v <@ cosine_ball('{25,20,2}', 0.001)
ORDER BY b;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gm WHERE v <@ l2_ball('{25,20,2}', 3);
SELECT 'l2' AS b, count(*), sum(id) FROM gm WHERE v <@ l2_ball('{25,20,2}', 3)
UNION ALL SELECT 'l1', count(*), sum(id) FROM gm WHERE v <@ l1_ball('{25,20,2}', 4)
UNION ALL SELECT 'cosine', count(*), sum(id) FROM gm WHERE v <@ cosine_ball('{25,20,2}', 0.001)
ORDER BY b;
SELECT count(*) FROM gm WHERE v <@ l2_ball('{25,20,2}', 3) AND v <@ l2_ball('{26,20,2}', 1.5);
SELECT id, v <-> '{25,20,2}' AS d FROM gm WHERE v <@ l2_ball('{25,20,2}', 1.5) ORDER BY v <-> '{25,20,2}', id;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*) FROM gm WHERE v <@ l2_ball('{25,20,2}', 3) AND v <@ l2_ball('{26,20,2}', 1.5);
SELECT ord, count(*) FROM gpuindex_search('gm_l2', '<@(real[],l2_ball)', ARRAY[l2_ball('{25,20,2}', 3), l2_ball('{0,0,1}', 0.5)]) GROUP BY ord ORDER BY ord;
SELECT ord, distance FROM gpuindex_nearest('gm_l1', '<+>(real[],real[])', ARRAY['{25,20,2}'::real[], '{50,50,3}'], 2) ORDER BY ord, distance;
SELECT v <@ l2_ball('{1,2,3}', 0) AS inside FROM (VALUES ('{1,2,3}'::real[]), ('{1,2,4}')) t(v);
SELECT count(*) FROM gm WHERE v <@ l2_ball('{25,20,2}', NULL);
SELECT '{1,2,3}'::real[] <@ l2_ball('{1,2,3}', 'NaN');
SELECT '{1,2,3}'::real[] <@ l2_ball('{1,2,3}', -1);
SELECT '{1,2,3}'::real[] <@ cosine_ball('{0,0,0}', 1);
SELECT '{1,2,3}'::real[] <@ ROW(NULL, 1)::l2_ball;
SET enable_seqscan = off;
SELECT count(*) FROM gm WHERE v <@ l2_ball('{1,2}', 1);
RESET enable_seqscan;
DROP TABLE ball_want;

-- Errors.
INSERT INTO gm VALUES (1, '{1,2}');
INSERT INTO gm VALUES (1, '{1,NaN,2}');
INSERT INTO gm VALUES (1, '{}');
INSERT INTO gm VALUES (1, '{1,NULL,3}');
INSERT INTO gm VALUES (1, '{0,0,0}');
SELECT '{1,2}'::real[] <-> '{1,2,3}';
SET enable_seqscan = off;
SELECT id FROM gm ORDER BY v <-> '{1,2}' LIMIT 1;
RESET enable_seqscan;
CREATE INDEX ON gm USING gpu_metric (id);
DROP TABLE gm;
DROP FUNCTION gm_ranks;

-- gpu_metric on text: edit distance (<~>, equal to fuzzystrmatch's
-- levenshtein), ORDER BY through the index equal to the sequential scan's
-- order, levenshtein_ball, batch functions, inserts, VACUUM, errors.
SET client_min_messages = warning;
SET gpuindex.device = cpu;
CREATE EXTENSION IF NOT EXISTS fuzzystrmatch;

CREATE TABLE gw (id int, w text) WITH (autovacuum_enabled = off);
-- Words over a small alphabet (many at distance 1 and 2 of each other),
-- duplicates, non-ASCII letters, the empty string, NULLs.
INSERT INTO gw SELECT g, translate(substr(md5(g::text), 1, 2 + g % 7), '0123456789', 'aeiouéèü東京')
  FROM generate_series(1, 3000) g;
INSERT INTO gw VALUES (-1, NULL), (-2, ''), (-3, 'kitten'), (-4, 'sitting'), (-5, 'kitten');
CREATE INDEX gw_lev ON gw USING gpu_metric (w) WITH (node_capacity = 4, delta_limit = 1, max_length = 12);

-- The operator is fuzzystrmatch's levenshtein on every pair of a sample.
SELECT 'kitten' <~> 'sitting' AS d, '' <~> 'abc' AS e, '東京' <~> '京都' AS f;
SELECT count(*) AS pairs, count(*) FILTER (WHERE a.w <~> b.w <> levenshtein(a.w, b.w)) AS differ
  FROM (SELECT w FROM gw WHERE id % 37 = 0 OR id < 0) a, (SELECT w FROM gw WHERE id % 41 = 0 OR id < 0) b;

EXPLAIN (COSTS OFF) SELECT id FROM gw ORDER BY w <~> 'kitten' LIMIT 5;

-- Index order equals the sequential scan's: same distance at every rank.
CREATE FUNCTION gw_ranks(q text, lim int) RETURNS TABLE (through_index bigint, differ bigint) AS $$
DECLARE a float8[]; b float8[];
BEGIN
  -- (SET LOCAL lasts to the end of the statement that calls this, which may
  -- call it again: the index is allowed back each time.)
  SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = on;
  SELECT array_agg(d) INTO a FROM (SELECT w <~> q AS d FROM gw ORDER BY w <~> q LIMIT lim) x;
  SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off;
  SELECT array_agg(d) INTO b FROM (SELECT w <~> q AS d FROM gw ORDER BY w <~> q LIMIT lim) x;
  RETURN QUERY SELECT cardinality(a)::bigint, (SELECT count(*) FROM unnest(a, b) u(x, y) WHERE x IS DISTINCT FROM y);
END $$ LANGUAGE plpgsql;

-- Queries longer than max_length too (the walk compares any lengths).
SELECT q, r.* FROM (VALUES ('kitten'), ('aeb東'), (''), ('abcdefghijklmnopqrstu')) qs(q), gw_ranks(q, 3100) r ORDER BY 1;
SET enable_seqscan = off;
SELECT id, w, w <~> 'kitten' AS d FROM gw ORDER BY w <~> 'kitten', id LIMIT 4;
RESET enable_seqscan;

-- Balls through the index (plain and bitmap) equal the sequential scan.
CREATE TEMP TABLE ball_want AS SELECT r, count(*) AS n, sum(id) AS s FROM generate_series(0, 3) r, gw
  WHERE levenshtein(w, 'aeb') <= r GROUP BY r;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM gw WHERE w <@ levenshtein_ball('aeb', 2);
SELECT r, count(*) = n AND sum(id) = s AS same FROM ball_want, gw WHERE w <@ levenshtein_ball('aeb', r) GROUP BY r, n, s ORDER BY r;
SET enable_bitmapscan = off;
SELECT r, count(*) = n AND sum(id) = s AS same FROM ball_want, gw WHERE w <@ levenshtein_ball('aeb', r) GROUP BY r, n, s ORDER BY r;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- Batch functions: each query's (ord, distance) rows equal a LATERAL
-- query's, with queries longer than max_length too (searched on the
-- CPU); gpuindex_nearest and gpuindex_search likewise.
SELECT v AS queries, count(*) AS rows, count(*) FILTER (WHERE g.distance IS DISTINCT FROM n.d) AS differ
  FROM (VALUES ('{kitten,aeb,"",東京}'::text[]), ('{kitten,aeb,abcdefghijklmnopq}')) qs(v),
  LATERAL (SELECT ord, distance, row_number() OVER (PARTITION BY ord ORDER BY distance, ctid) AS rk
        FROM gpu_metric_knn_text('gw_lev', qs.v, 6)) g
  JOIN LATERAL (SELECT i AS ord, n.d, n.rk FROM unnest(qs.v) WITH ORDINALITY q(q, i),
        LATERAL (SELECT w <~> q.q AS d, row_number() OVER (ORDER BY w <~> q.q) AS rk FROM gw WHERE w IS NOT NULL
                 ORDER BY w <~> q.q LIMIT 6) n) n USING (ord, rk) GROUP BY v ORDER BY v;
SELECT ord, count(*), max(distance) FROM gpu_metric_within_text('gw_lev', ARRAY['kitten', 'aeb', 'kittenkittenki'], 2) GROUP BY ord ORDER BY ord;
SELECT ord, count(*) FROM gw, unnest(ARRAY['kitten', 'aeb', 'kittenkittenki']) WITH ORDINALITY q(q, ord) WHERE levenshtein(w, q) <= 2 GROUP BY ord ORDER BY ord;
SELECT ord, count(*) FROM gpu_metric_within_text('gw_lev', ARRAY['kittenkittenki'], 8) GROUP BY ord;
SELECT count(*) FROM gw WHERE w <~> 'kittenkittenki' <= 8;
SELECT ord, distance FROM gpuindex_nearest('gw_lev', '<~>(text,text)', ARRAY['kitten', 'sittin'], 2) ORDER BY ord, distance;
SELECT ord, count(*) FROM gpuindex_search('gw_lev', '<@(text,levenshtein_ball)', ARRAY[levenshtein_ball('kitten', 1), levenshtein_ball('aeb', 2)]) GROUP BY ord ORDER BY ord;

-- Inserts (the delta), deletes, VACUUM (which rebuilds the tree).
INSERT INTO gw SELECT 5000 + g, repeat('ab', g % 6) || 'k' FROM generate_series(1, 400) g;
DELETE FROM gw WHERE id % 4 = 0;
SELECT r.* FROM gw_ranks('abab', 3000) r;
VACUUM gw;
SELECT r.* FROM gw_ranks('abab', 3000) r;
SELECT tree_entries, delta_entries, null_entries FROM gpu_metric_check('gw_lev');

-- Errors.
INSERT INTO gw VALUES (1, repeat('x', 13));
SELECT * FROM gpu_metric_knn_text('gw_lev', ARRAY['a', NULL], 1);
SELECT * FROM gpu_metric_knn('gw_lev', '{1,2}'::real[], 1);
SELECT * FROM gpu_metric_knn_text('gw_lev', ARRAY[]::text[], 1);
CREATE INDEX ON gw USING gpu_metric (w) WITH (max_length = 256);
CREATE TABLE gv (v varchar(10));
CREATE INDEX ON gv USING gpu_metric (v text_levenshtein_ops);
DROP TABLE gv;
DROP TABLE gw;
DROP FUNCTION gw_ranks;

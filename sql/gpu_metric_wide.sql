-- gpu_metric with entries wider than a page: vectors of 3,000 and 16,000
-- dimensions (an entry takes a head page and continuation pages), through
-- CREATE INDEX, every rank against the sequential scan, inserts into the
-- delta, deletes, VACUUM's rebuild and the check function; more than
-- 16,000 dimensions: an ERROR.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

-- Twelve clusters of 3,000 dimensions.
CREATE FUNCTION gmw_vec(g int, dim int) RETURNS real[] AS $$
  SELECT array_agg((((g % 12) * 37 + i * 11) % 101 + ((g * 7919 + i * 104729) % 1009) / 1009.0)::real ORDER BY i)
  FROM generate_series(1, dim) i
$$ LANGUAGE sql IMMUTABLE;
CREATE TABLE gmw (id int, v real[]) WITH (autovacuum_enabled = off);
INSERT INTO gmw SELECT g, gmw_vec(g, 3000) FROM generate_series(1, 400) g;
-- 30 copies of one row, and a far outlier.
INSERT INTO gmw SELECT 1000 + g, gmw_vec(5, 3000) FROM generate_series(1, 30) g;
INSERT INTO gmw SELECT 2000, array_agg(1e6::real) FROM generate_series(1, 3000);
INSERT INTO gmw VALUES (-1, NULL);
CREATE INDEX gmw_l2 ON gmw USING gpu_metric (v) WITH (node_capacity = 4, delta_limit = 1);
CREATE INDEX gmw_l1 ON gmw USING gpu_metric (v real_l1_ops) WITH (node_capacity = 4);
CREATE INDEX gmw_cos ON gmw USING gpu_metric (v real_cosine_ops) WITH (node_capacity = 4);

-- Index order equals the sequential scan's: same distance at every rank.
CREATE FUNCTION gmw_ranks(tab text, op text, q real[], lim int) RETURNS TABLE (through_index bigint, differ bigint) AS $$
DECLARE a float8[]; b float8[];
BEGIN
  -- (SET LOCAL lasts to the end of the statement that calls this, which may
  -- call it again: the index is allowed back each time.)
  SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = on;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM %I ORDER BY v %s $1 LIMIT %s) x', op, tab, op, lim) INTO a USING q;
  SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off;
  EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM %I ORDER BY v %s $1 LIMIT %s) x', op, tab, op, lim) INTO b USING q;
  RETURN QUERY SELECT cardinality(a)::bigint, (SELECT count(*) FROM unnest(a, b) u(x, y) WHERE x IS DISTINCT FROM y);
END $$ LANGUAGE plpgsql;
CREATE FUNCTION gmw_all(tab text) RETURNS TABLE (op text, q int, through_index bigint, differ bigint) AS $$
  SELECT o.op, qs.g, r.* FROM (VALUES ('<->'), ('<+>'), ('<=>')) o(op), (VALUES (5), (1000), (-7)) qs(g),
    gmw_ranks(tab, o.op, gmw_vec(qs.g, 3000), 500) r ORDER BY 1, 2
$$ LANGUAGE sql;

SET plan_cache_mode = force_generic_plan;
PREPARE gmw_q(real[]) AS SELECT id FROM gmw ORDER BY v <-> $1 LIMIT 5;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) EXECUTE gmw_q(gmw_vec(5, 3000));
RESET enable_seqscan;
SELECT * FROM gmw_all('gmw');
SELECT nodes, height, tree_entries, delta_entries, null_entries FROM gpu_metric_check('gmw_l2');
SELECT nodes, height, tree_entries FROM gpu_metric_check('gmw_cos');

-- Inserts go to the delta (an entry of continuation pages each), deletes,
-- then VACUUM rebuilds the tree.
INSERT INTO gmw SELECT g, gmw_vec(g, 3000) FROM generate_series(401, 460) g;
SELECT * FROM gmw_all('gmw');
DELETE FROM gmw WHERE id % 5 = 0;
VACUUM gmw;
SELECT nodes, height, tree_entries, delta_entries, null_entries FROM gpu_metric_check('gmw_l2');
SELECT * FROM gmw_all('gmw');
SELECT id FROM gmw ORDER BY v <-> gmw_vec(17, 3000) LIMIT 3;
-- A second rebuild after more inserts.
INSERT INTO gmw SELECT g, gmw_vec(g, 3000) FROM generate_series(461, 520) g;
VACUUM gmw;
SELECT * FROM gmw_all('gmw') WHERE differ > 0;
SELECT nodes, height, tree_entries, delta_entries FROM gpu_metric_check('gmw_l2');

-- At the edges: 2,032 dimensions fill a page, 2,033 take a continuation
-- page for one float.
CREATE TABLE gmw_edge (id int, d int, v real[]);
INSERT INTO gmw_edge SELECT g, d, gmw_vec(g, d) FROM generate_series(1, 30) g, (VALUES (2032), (2033)) x(d);
CREATE INDEX gmw_edge_32 ON gmw_edge USING gpu_metric (v) WITH (node_capacity = 3) WHERE d = 2032;
CREATE INDEX gmw_edge_33 ON gmw_edge USING gpu_metric (v) WITH (node_capacity = 3) WHERE d = 2033;
INSERT INTO gmw_edge SELECT g, d, gmw_vec(g, d) FROM generate_series(31, 33) g, (VALUES (2032), (2033)) x(d);
SET enable_seqscan = off;
SELECT array_agg(id) FROM (SELECT id FROM gmw_edge WHERE d = 2032 ORDER BY v <-> gmw_vec(7, 2032) LIMIT 8) x;
SELECT array_agg(id) FROM (SELECT id FROM gmw_edge WHERE d = 2033 ORDER BY v <-> gmw_vec(7, 2033) LIMIT 8) x;
RESET enable_seqscan;
SET enable_indexscan = off;
SELECT array_agg(id) FROM (SELECT id FROM gmw_edge WHERE d = 2032 ORDER BY v <-> gmw_vec(7, 2032) LIMIT 8) x;
SELECT array_agg(id) FROM (SELECT id FROM gmw_edge WHERE d = 2033 ORDER BY v <-> gmw_vec(7, 2033) LIMIT 8) x;
RESET enable_indexscan;
SELECT nodes, height, tree_entries, delta_entries FROM gpu_metric_check('gmw_edge_32');
SELECT nodes, height, tree_entries, delta_entries FROM gpu_metric_check('gmw_edge_33');

-- 16,000 dimensions, pgvector's limit; one more is an ERROR.
CREATE TABLE gmw16 (id int, v real[]);
INSERT INTO gmw16 SELECT g, gmw_vec(g, 16000) FROM generate_series(1, 40) g;
CREATE INDEX gmw16_l2 ON gmw16 USING gpu_metric (v) WITH (node_capacity = 3);
SELECT * FROM gmw_ranks('gmw16', '<->', gmw_vec(3, 16000), 40);
SELECT * FROM gmw_ranks('gmw16', '<->', gmw_vec(100, 16000), 40);
INSERT INTO gmw16 SELECT g, gmw_vec(g, 16000) FROM generate_series(41, 45) g;
SELECT * FROM gmw_ranks('gmw16', '<->', gmw_vec(42, 16000), 45);
SELECT nodes, height, tree_entries, delta_entries FROM gpu_metric_check('gmw16_l2');
INSERT INTO gmw16 VALUES (0, gmw_vec(1, 16001));
CREATE TABLE gmw_over (v real[]);
INSERT INTO gmw_over VALUES (gmw_vec(1, 16001));
CREATE INDEX ON gmw_over USING gpu_metric (v);

DROP TABLE gmw, gmw_edge, gmw16, gmw_over;
DROP FUNCTION gmw_all(text), gmw_ranks(text, text, real[], int), gmw_vec(int, int);

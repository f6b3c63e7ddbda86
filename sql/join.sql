-- GpuIndexJoin: the plans it makes (join types, the LATERAL top-k
-- pattern, TID probes), what it does not take (right and full joins, volatile probes,
-- row locks, OFFSET), gpuindex.enable_join, and answers equal to the
-- planner's own joins on small tables.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

CREATE TABLE jo (id int, k int8, p point, f float8);
INSERT INTO jo SELECT g, CASE WHEN g % 50 = 0 THEN NULL ELSE g % 300 END,
  point(g % 37, g % 41), (g % 7)::float8 FROM generate_series(1, 1000) g;
CREATE TABLE ji (id int, k int8, p point, v real[]);
INSERT INTO ji SELECT g, g % 400, point(g % 53, g % 29), ARRAY[g % 13, g % 17]::real[]
  FROM generate_series(1, 2000) g;
CREATE INDEX ji_k ON ji USING gpu_btree (k);
CREATE INDEX ji_p ON ji USING gpu_spatial (p);
CREATE INDEX ji_v ON ji USING gpu_metric (v);
ANALYZE jo; ANALYZE ji;

-- Forced (the built-in joins off), each join type and operator.
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo JOIN ji ON ji.k = jo.k;
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo LEFT JOIN ji ON ji.k = jo.k AND ji.id > 10 WHERE ji.id IS NULL OR ji.id < 500;
EXPLAIN (COSTS OFF) SELECT id FROM jo WHERE EXISTS (SELECT 1 FROM ji WHERE ji.k = jo.k);
EXPLAIN (COSTS OFF) SELECT id FROM jo WHERE NOT EXISTS (SELECT 1 FROM ji WHERE ji.k = jo.k);
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo JOIN ji ON ji.p <@ box(jo.p, point(jo.p[0] + 2, jo.p[1] + 2));
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo JOIN ji ON ji.v <@ l2_ball(ARRAY[jo.f, jo.f]::real[], 1.5);
EXPLAIN (COSTS OFF) SELECT jo.id, s.id FROM jo CROSS JOIN LATERAL
  (SELECT id FROM ji WHERE ji.id % 2 = 0 ORDER BY ji.p <-> jo.p LIMIT 3) s;
EXPLAIN (COSTS OFF) SELECT jo.id, s.d FROM jo LEFT JOIN LATERAL
  (SELECT ji.v <-> ARRAY[jo.f, 1]::real[] AS d FROM ji ORDER BY ji.v <-> ARRAY[jo.f, 1]::real[] LIMIT 2) s ON s.d < 3;

-- Not taken: the inner side preserved, a volatile probe, row locks, OFFSET.
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo RIGHT JOIN ji ON ji.k = jo.k;
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo JOIN ji ON ji.k = jo.k + (random() * 0)::int;
EXPLAIN (COSTS OFF) SELECT jo.id FROM jo JOIN ji ON ji.k = jo.k FOR UPDATE OF jo;
EXPLAIN (COSTS OFF) SELECT jo.id, s.id FROM jo CROSS JOIN LATERAL (SELECT id FROM ji ORDER BY ji.p <-> jo.p OFFSET 1 LIMIT 3) s;

-- Answers equal the planner's own joins.
CREATE FUNCTION jsame(q text) RETURNS TABLE (rows bigint, same boolean) AS $$
DECLARE a text[]; b text[];
BEGIN
  -- (SET LOCAL: the session's settings stay forced for the next call, and
  -- a caller that runs several calls in one statement, jfused, gets each
  -- with the node on.)
  SET LOCAL gpuindex.enable_join = on;
  SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL enable_nestloop = off;
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', q) INTO a;
  SET LOCAL gpuindex.enable_join = off;
  SET LOCAL enable_hashjoin = on; SET LOCAL enable_mergejoin = on; SET LOCAL enable_nestloop = on;
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', q) INTO b;
  RETURN QUERY SELECT coalesce(cardinality(a), 0)::bigint, a IS NOT DISTINCT FROM b;
END $$ LANGUAGE plpgsql;
SELECT * FROM jsame('SELECT jo.id, ji.id FROM jo JOIN ji ON ji.k = jo.k');
SELECT * FROM jsame('SELECT jo.id, ji.id FROM jo LEFT JOIN ji ON ji.k = jo.k AND ji.id % 3 = 0');
SELECT * FROM jsame('SELECT id FROM jo WHERE NOT EXISTS (SELECT 1 FROM ji WHERE ji.k = jo.k)');
SELECT * FROM jsame('SELECT jo.id, ji.id FROM jo JOIN ji ON ji.p <@ box(jo.p, point(jo.p[0] + 2, jo.p[1] + 2))');
SELECT * FROM jsame('SELECT jo.id, ji.id FROM jo JOIN ji ON ji.v <@ l2_ball(ARRAY[jo.f, jo.f]::real[], 1.5)');
SELECT * FROM jsame('SELECT jo.id, s.d FROM jo CROSS JOIN LATERAL (SELECT ji.p <-> jo.p AS d FROM ji ORDER BY ji.p <-> jo.p LIMIT 3) s');
-- The node's projection: plain columns copied (without pgrx's guard,
-- slot::project_columns), an expression evaluated (its ERROR clean).
SELECT * FROM jsame('SELECT ji.k, ji.id, jo.id, ji.p, jo.k FROM jo JOIN ji ON ji.k = jo.k');
EXPLAIN (COSTS OFF) SELECT jo.id / (ji.id - ji.id) FROM jo JOIN ji ON ji.k = jo.k;
SELECT jo.id / (ji.id - ji.id) FROM jo JOIN ji ON ji.k = jo.k;
SELECT count(*) FROM jo JOIN ji ON ji.k = jo.k;
-- The select list's ORDER BY distance is the index's where finite:
-- twice, beside an expression over it; where PostgreSQL's distance
-- overflows, its ERROR.
SELECT * FROM jsame('SELECT jo.id, s.* FROM jo CROSS JOIN LATERAL (SELECT ji.p <-> jo.p AS d, (ji.p <-> jo.p) * 3 AS t, ji.p <-> jo.p AS e FROM ji ORDER BY ji.p <-> jo.p LIMIT 4) s');
CREATE TABLE jfar (id int, p point);
INSERT INTO jfar VALUES (1, point(1e308, 0)), (2, point(-1e308, 0)), (3, point(0, 0));
CREATE INDEX ON jfar USING gpu_spatial (p);
EXPLAIN (COSTS OFF) SELECT s.d FROM jfar o CROSS JOIN LATERAL (SELECT jfar.p <-> o.p AS d FROM jfar ORDER BY jfar.p <-> o.p LIMIT 2) s;
SELECT s.d FROM jfar o CROSS JOIN LATERAL (SELECT jfar.p <-> o.p AS d FROM jfar ORDER BY jfar.p <-> o.p LIMIT 2) s ORDER BY 1;
SELECT s.d FROM jfar o CROSS JOIN LATERAL (SELECT jfar.p <-> o.p AS d FROM jfar ORDER BY jfar.p <-> o.p LIMIT 3) s;
SET gpuindex.enable_join = off;
SELECT s.d FROM jfar o CROSS JOIN LATERAL (SELECT jfar.p <-> o.p AS d FROM jfar ORDER BY jfar.p <-> o.p LIMIT 3) s;
RESET gpuindex.enable_join;
DROP TABLE jfar;
-- A LIMIT far above the table's rows: every row for each outer row (no
-- buffer is sized by the LIMIT).
EXPLAIN (COSTS OFF) SELECT jo.id, s.d FROM (SELECT * FROM jo WHERE id <= 5) jo CROSS JOIN LATERAL
  (SELECT ji.p <-> jo.p AS d FROM ji ORDER BY ji.p <-> jo.p LIMIT 1000000000) s;
SELECT * FROM jsame('SELECT jo.id, s.d FROM (SELECT * FROM jo WHERE id <= 5) jo CROSS JOIN LATERAL (SELECT ji.p <-> jo.p AS d FROM ji ORDER BY ji.p <-> jo.p LIMIT 1000000000) s');
-- The inner row's ctid (NULL where a left join found none).
EXPLAIN (COSTS OFF) SELECT jo.id, ji.ctid FROM jo LEFT JOIN ji ON ji.k = jo.k;
SELECT * FROM jsame('SELECT jo.id, ji.ctid FROM jo LEFT JOIN ji ON ji.k = jo.k AND ji.id % 3 = 0');

-- TID probes: `t.ctid = outer.ctid`, as the batch functions' rows are
-- joined back. The row at each TID, as a TID scan finds it: old versions
-- of HOT-updated rows, deleted rows, TIDs past a page's last line pointer
-- or the table's last block, offset 0 and NULL name no row; repeats match
-- once each. Inside a transaction that changed rows (pages not
-- all-visible), after VACUUM (all-visible), under SERIALIZABLE.
CREATE TABLE jt (id int, k int8, pad text) WITH (autovacuum_enabled = off, fillfactor = 50);
INSERT INTO jt SELECT g, g % 100, repeat('y', g % 20) FROM generate_series(1, 3000) g;
CREATE TABLE jc (n int, c tid);
INSERT INTO jc SELECT id, ctid FROM jt;
INSERT INTO jc SELECT 0, c::tid FROM unnest(ARRAY['(0,0)', '(0,999)', '(99999,1)', NULL]) c;
INSERT INTO jc SELECT -n, c FROM jc WHERE n % 7 = 0;
UPDATE jt SET pad = pad || 'u' WHERE id % 5 = 0;
DELETE FROM jt WHERE id % 11 = 0;
ANALYZE jt; ANALYZE jc;
EXPLAIN (COSTS OFF) SELECT jc.n, jt.id FROM jc JOIN jt ON jt.ctid = jc.c;
EXPLAIN (COSTS OFF) SELECT n FROM jc WHERE NOT EXISTS (SELECT 1 FROM jt WHERE jt.ctid = jc.c);
SELECT * FROM jsame('SELECT jc.n, jt.id, jt.pad FROM jc JOIN jt ON jt.ctid = jc.c');
SELECT * FROM jsame('SELECT jc.n, jt.id FROM jc LEFT JOIN jt ON jt.ctid = jc.c AND jt.k < 50');
SELECT * FROM jsame('SELECT n FROM jc WHERE EXISTS (SELECT 1 FROM jt WHERE jt.ctid = jc.c)');
SELECT * FROM jsame('SELECT n FROM jc WHERE NOT EXISTS (SELECT 1 FROM jt WHERE jt.ctid = jc.c)');
SELECT * FROM jsame('SELECT count(*) FROM jc JOIN jt ON jc.c = jt.ctid');
SELECT * FROM jsame('SELECT jc.n, jt.ctid, jt.id FROM jc LEFT JOIN jt ON jt.ctid = jc.c');
SELECT * FROM jsame('SELECT p.ord, t.id FROM gpu_btree_probe(''ji_k'', ARRAY[1, 5, 5, NULL, 399]::int8[]) p JOIN ji t ON t.ctid = p.ctid');
BEGIN;
UPDATE jt SET pad = 'v' WHERE id % 3 = 0;
DELETE FROM jt WHERE id % 13 = 0;
INSERT INTO jc SELECT 1000000 + id, ctid FROM jt WHERE id % 3 = 0;
SELECT * FROM jsame('SELECT jc.n, jt.id, jt.pad FROM jc JOIN jt ON jt.ctid = jc.c');
ROLLBACK;
VACUUM jt;
SELECT * FROM jsame('SELECT jc.n, jt.id, jt.pad FROM jc JOIN jt ON jt.ctid = jc.c');
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM jsame('SELECT jc.n, jt.id FROM jc LEFT JOIN jt ON jt.ctid = jc.c');
COMMIT;
SET gpuindex.join_chunk = 7;
SELECT * FROM jsame('SELECT jc.n, jt.id, jt.pad FROM jc JOIN jt ON jt.ctid = jc.c');
RESET gpuindex.join_chunk;
DROP TABLE jt, jc;

-- A batch function's call joined back by ctid: the node runs the call's
-- search itself ("Outer Call"; the function scan never runs) and reads
-- each row once. Rows equal the function's joined by the planner: HOT
-- chains (pad updated), moved keys (k updated), deleted rows, repeated and
-- NULL keys, extra join quals, semi joins, empty and NULL arrays; inside a
-- transaction that changed rows, after VACUUM, under SERIALIZABLE, in
-- chunks of 7. Not fused: left and anti joins, a filter on the call's
-- rows, WITH ORDINALITY, an index of another table.
CREATE TABLE jf (id int, k int8, s text COLLATE "C", pad text) WITH (autovacuum_enabled = off, fillfactor = 50);
INSERT INTO jf SELECT g, g % 97, 'w' || (g % 89), repeat('z', g % 9) FROM generate_series(1, 3000) g;
CREATE INDEX jf_k ON jf USING gpu_btree (k);
CREATE INDEX jf_l ON jf USING gpu_learned (k);
CREATE INDEX jf_s ON jf USING gpu_art (s);
UPDATE jf SET pad = pad || 'h' WHERE id % 4 = 0;
UPDATE jf SET k = k + 1000 WHERE id % 9 = 0;
DELETE FROM jf WHERE id % 10 = 0;
ANALYZE jf;
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_learned_probe('jf_l', ARRAY[1, 2]::int8[]) p JOIN jf t ON t.ctid = p.ctid;
EXPLAIN (COSTS OFF) SELECT p.ord FROM gpu_btree_probe('jf_k', ARRAY[1, 2]::int8[]) p WHERE EXISTS (SELECT 1 FROM jf t WHERE t.ctid = p.ctid);
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_spatial_within('ji_p', ARRAY[point(1, 1)], 2) p JOIN ji t ON t.ctid = p.ctid;
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_btree_probe('jf_k', ARRAY[1, 2]::int8[]) p LEFT JOIN jf t ON t.ctid = p.ctid;
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_btree_probe('jf_k', ARRAY[1, 2]::int8[]) p JOIN jf t ON t.ctid = p.ctid WHERE p.ord > 1;
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_btree_probe('jf_k', ARRAY[1, 2]::int8[]) WITH ORDINALITY p JOIN jf t ON t.ctid = p.ctid;
EXPLAIN (COSTS OFF) SELECT p.ord, t.id FROM gpu_btree_probe('ji_k', ARRAY[1, 2]::int8[]) p JOIN jf t ON t.ctid = p.ctid;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM gpu_art_probe('jf_s', ARRAY['w1', 'w2', 'w2', NULL, 'x']) p JOIN jf t ON t.ctid = p.ctid;
CREATE FUNCTION jfused() RETURNS TABLE (q int, rows bigint, same boolean) AS $$
DECLARE keys text := 'ARRAY[1, 5, 5, NULL, 96, 1001, 1005, 4000, 0]::int8[]';
BEGIN
  RETURN QUERY SELECT 1, * FROM jsame(format('SELECT p.ord, p.ctid, t.id, t.pad FROM gpu_btree_probe(''jf_k'', %s) p JOIN jf t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 2, * FROM jsame(format('SELECT p.ord, p.ctid, t.id, t.k FROM gpu_learned_probe(''jf_l'', %s) p JOIN jf t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 3, * FROM jsame('SELECT p.ord, p.ctid, t.id FROM gpu_art_probe(''jf_s'', ARRAY[''w1'', ''w2'', ''w2'', NULL, ''x'', ''w88'']) p JOIN jf t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 4, * FROM jsame(format('SELECT p.ord, t.id FROM gpuindex_search(''jf_k'', ''=(bigint,bigint)'', %s) p JOIN jf t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 5, * FROM jsame(format('SELECT p.ord, p.ctid FROM gpu_btree_probe(''jf_k'', %s) p WHERE EXISTS (SELECT 1 FROM jf t WHERE t.ctid = p.ctid AND t.id %% 2 = 0)', keys));
  RETURN QUERY SELECT 6, * FROM jsame(format('SELECT count(*), sum(p.ord) FROM gpu_learned_probe(''jf_l'', %s) p JOIN jf t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 7, * FROM jsame(format('SELECT p.ord, t.id FROM gpu_btree_probe(''jf_k'', %s) p JOIN jf t ON t.ctid = p.ctid AND t.id > p.ord * 300', keys));
  RETURN QUERY SELECT 8, * FROM jsame('SELECT p.ord, t.id FROM gpu_btree_probe(''jf_k'', ''{}''::int8[]) p JOIN jf t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 9, * FROM jsame('SELECT p.ord, t.id FROM gpu_learned_probe(''jf_l'', NULL::int8[]) p JOIN jf t ON t.ctid = p.ctid');
  -- gpu_spatial's (ji: 2,000 points).
  RETURN QUERY SELECT 11, * FROM jsame('SELECT p.ord, p.ctid, t.id FROM gpu_spatial_range(''ji_p'', ARRAY[box(point(0, 0), point(5, 5)), NULL, box(point(10, 10), point(12, 28))]) p JOIN ji t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 12, * FROM jsame('SELECT p.ord, t.id FROM gpu_spatial_within(''ji_p'', ARRAY[circle(point(3, 3), 2), circle(point(20, 20), 4)]) p JOIN ji t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 13, * FROM jsame('SELECT p.ord, t.id FROM gpu_spatial_within(''ji_p'', ARRAY[point(3, 3), point(40, 10), point(3, 3)], 2.5) p JOIN ji t ON t.ctid = p.ctid');
  -- The table's own ctid: the call's.
  RETURN QUERY SELECT 14, * FROM jsame(format('SELECT p.ord, t.ctid, t.ctid = p.ctid FROM gpu_btree_probe(''jf_k'', %s) p JOIN jf t ON t.ctid = p.ctid', keys));
  -- Rescanned with new arguments (a SubPlan's parameter).
  RETURN QUERY SELECT 10, * FROM jsame('SELECT o.n, (SELECT sum(t.id) FROM gpu_btree_probe(''jf_k'', ARRAY[o.n, o.n + 1000]) p JOIN jf t ON t.ctid = p.ctid) FROM generate_series(0::int8, 30) o(n)');
END $$ LANGUAGE plpgsql;
SELECT * FROM jfused();
BEGIN;
UPDATE jf SET pad = 'v' WHERE id % 3 = 0;
UPDATE jf SET k = 5 WHERE id % 7 = 0;
DELETE FROM jf WHERE id % 13 = 0;
SELECT * FROM jfused();
ROLLBACK;
VACUUM jf;
SELECT * FROM jfused();
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM jfused();
COMMIT;
SET gpuindex.join_chunk = 7;
SELECT * FROM jfused();
RESET gpuindex.join_chunk;
-- A generic plan: the keys a parameter.
SET plan_cache_mode = force_generic_plan;
PREPARE jfp(int8[]) AS SELECT count(*), sum(p.ord), sum(t.id) FROM gpu_learned_probe('jf_l', $1) p JOIN jf t ON t.ctid = p.ctid;
EXPLAIN (COSTS OFF) EXECUTE jfp(ARRAY[1]);
EXECUTE jfp(ARRAY[1, 5, 5, NULL, 96, 1001]);
EXECUTE jfp(ARRAY[2]);
DEALLOCATE jfp;
RESET plan_cache_mode;
SET gpuindex.enable_join = off;
SELECT count(*), sum(p.ord), sum(t.id) FROM gpu_learned_probe('jf_l', ARRAY[1, 5, 5, NULL, 96, 1001]::int8[]) p JOIN jf t ON t.ctid = p.ctid;
SELECT count(*), sum(p.ord), sum(t.id) FROM gpu_learned_probe('jf_l', ARRAY[2]::int8[]) p JOIN jf t ON t.ctid = p.ctid;
RESET gpuindex.enable_join;
-- The planner's rows for a call (gpuindex_batch_rows): a key that is one
-- of the column's most common values, its share of the table (jf.k's 1,
-- 2 and 3: ~25 rows each; jf.s's w1 and w2: ~30); any other key, what
-- the most common values leave per distinct value left where ANALYZE saw
-- every value (jf.s: none, its values are all most common) or its
-- distinct count scales with the table (ji.k: 5 rows a value), one past
-- a long tail (jf.k: 194 values, 100 of them most common); k per query;
-- PostgreSQL's 1000 for a range and where the planner cannot see the
-- array.
CREATE FUNCTION jrows(q text) RETURNS text AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN ' || q LOOP
    RETURN substring(line from 'rows=([0-9]+)');
  END LOOP;
END $$ LANGUAGE plpgsql;
SELECT jrows('SELECT * FROM gpu_btree_probe(''jf_k'', ARRAY[1, 2, 3]::int8[])') AS three_keys,
  jrows('SELECT * FROM gpu_btree_probe(''jf_k'', ARRAY[10001, 10002, 10003]::int8[])') AS rare_keys,
  jrows('SELECT * FROM gpu_learned_probe(''jf_l'', ''{}''::int8[])') AS no_keys,
  jrows('SELECT * FROM gpu_btree_probe(''jf_k'', (SELECT array_agg(g::int8) FROM generate_series(1, 5) g))') AS unseen,
  jrows('SELECT * FROM gpu_art_probe(''jf_s'', ARRAY[''w1'', ''w2''])') AS all_seen,
  jrows('SELECT * FROM gpu_art_probe(''jf_s'', ARRAY[''w1'', ''x'', ''y''])') AS all_seen_two_unseen,
  jrows('SELECT * FROM gpu_btree_probe(''ji_k'', ARRAY[1, 2]::int8[])') AS scaling,
  jrows('SELECT * FROM gpu_spatial_knn(''ji_p'', ARRAY[point(1, 1), point(2, 2)], 5)') AS knn,
  jrows('SELECT * FROM gpuindex_nearest(''ji_p'', ''<->(point,point)'', ARRAY[point(1, 1)], 3)') AS nearest,
  jrows('SELECT * FROM gpu_metric_knn(''ji_v'', ARRAY[[1, 1], [2, 2], [3, 3]]::real[], 4)') AS rows_of_vectors,
  jrows('SELECT * FROM gpu_metric_knn(''ji_v'', ARRAY[1, 1]::real[], 4)') AS one_vector,
  jrows('SELECT * FROM gpu_spatial_range(''ji_p'', ARRAY[box(point(0, 0), point(5, 5))])') AS range;
-- The join as written over unnest of a constant array: its rows per key,
-- as the call's (PostgreSQL's join estimate takes each key for an
-- average value: 42 and 42).
SELECT jrows('SELECT t.id FROM unnest(ARRAY[1, 2, 3]::int8[]) u(k) JOIN jf t ON t.k = u.k') AS join_three_keys,
  jrows('SELECT t.id FROM unnest(ARRAY[10001, 10002, 10003]::int8[]) u(k) JOIN jf t ON t.k = u.k') AS join_rare_keys;
DROP FUNCTION jrows(text);
-- The function's ERRORs, raised by the node.
SELECT count(*) FROM gpu_btree_probe('jf_k', ARRAY['x']) p JOIN jf t ON t.ctid = p.ctid;
SELECT count(*) FROM gpuindex_search('jf_k', '<(bigint,bigint)', ARRAY[1]::int8[]) p JOIN jf t ON t.ctid = p.ctid;
DROP FUNCTION jfused();
DROP TABLE jf;

-- ERRORs while a chunk is read (the outer plan's, the probe expression's):
-- clean, and the session goes on (the chunk's rows are read under one guard).
SELECT count(*) FROM (SELECT k FROM jo WHERE 10 / (id - 600) > -100) o JOIN ji ON ji.k = o.k;
EXPLAIN (COSTS OFF) SELECT count(*) FROM jo JOIN ji ON ji.k = jo.k / (jo.id - 701);
SELECT count(*) FROM jo JOIN ji ON ji.k = jo.k / (jo.id - 701);
SELECT count(*) FROM jo JOIN ji ON ji.k = jo.k;

-- Sums computed by the node (whole, and under a Gather each participant's
-- partial sums, which PostgreSQL finalizes), equal to PostgreSQL's: int2,
-- int4 and int8 columns, NULLs, an int8 sum past int8's range (numeric),
-- no rows, quals, a left join's null-extended rows; rows stored before a
-- column was added (fewer attributes than are read), a column after one of
-- variable width.
CREATE TABLE js (id int, k int8, a int2, b int4, c int8) WITH (autovacuum_enabled = off);
INSERT INTO js SELECT g, g % 50, (g % 300 - 150)::int2, CASE WHEN g % 7 = 0 THEN NULL ELSE g * 1000 END,
  CASE WHEN g % 11 = 0 THEN NULL ELSE 9000000000000000000 - g END FROM generate_series(1, 20000) g;
CREATE INDEX js_k ON js USING gpu_btree (k);
ALTER TABLE js ADD COLUMN d int8 DEFAULT 7, ADD COLUMN e text, ADD COLUMN f int4 DEFAULT 3;
INSERT INTO js SELECT g, g % 50, 1, 2, 3, g, 'e' || g, g FROM generate_series(20001, 21000) g;
ANALYZE js;
CREATE FUNCTION jsums() RETURNS TABLE (q int, rows bigint, same boolean) AS $$
DECLARE keys text := 'ARRAY[1, 2, 2, NULL, 49, 77]::int8[]';
BEGIN
  RETURN QUERY SELECT 1, * FROM jsame(format('SELECT sum(t.a), sum(t.b), sum(t.c), count(*), sum(p.ord) FROM gpu_btree_probe(''js_k'', %s) p JOIN js t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 2, * FROM jsame('SELECT sum(t.c), sum(t.b) FROM gpu_btree_probe(''js_k'', ARRAY[77]::int8[]) p JOIN js t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 3, * FROM jsame('SELECT sum(t.c) FROM gpu_btree_probe(''js_k'', ARRAY[0]::int8[]) p JOIN js t ON t.ctid = p.ctid WHERE t.id % 11 = 0');
  RETURN QUERY SELECT 4, * FROM jsame('SELECT sum(js.c), sum(js.a), count(*) FROM jo JOIN js ON js.k = jo.k');
  RETURN QUERY SELECT 5, * FROM jsame('SELECT sum(js.c) FROM jo JOIN js ON js.k = jo.k AND js.id % 3 = 0');
  RETURN QUERY SELECT 6, * FROM jsame('SELECT sum(js.b), count(*) FROM jo LEFT JOIN js ON js.k = jo.k + 40');
  RETURN QUERY SELECT 7, * FROM jsame('SELECT sum(t.b) FROM gpu_btree_probe(''js_k'', (SELECT array_agg(g % 50) FROM generate_series(1, 300) g)) p JOIN js t ON t.ctid = p.ctid');
  RETURN QUERY SELECT 8, * FROM jsame(format('SELECT sum(t.d), sum(t.c), count(*) FROM gpu_btree_probe(''js_k'', %s) p JOIN js t ON t.ctid = p.ctid', keys));
  RETURN QUERY SELECT 9, * FROM jsame(format('SELECT sum(t.f) FROM gpu_btree_probe(''js_k'', %s) p JOIN js t ON t.ctid = p.ctid', keys));
  -- Dense windows of matches (thousands on a few pages), summed on every
  -- core: rows with NULLs and rows stored before the columns were added
  -- among them.
  RETURN QUERY SELECT 10, * FROM jsame('SELECT sum(t.d), sum(t.c), count(*) FROM gpu_btree_probe(''js_k'', (SELECT array_agg(g % 50) FROM generate_series(1, 300) g)) p JOIN js t ON t.ctid = p.ctid');
END $$ LANGUAGE plpgsql;
EXPLAIN (COSTS OFF) SELECT sum(js.c) FROM jo JOIN js ON js.k = jo.k;
SELECT * FROM jsums();
SELECT sum(t.c), sum(t.b), count(*) FROM gpu_btree_probe('js_k', ARRAY[1, 2]::int8[]) p JOIN js t ON t.ctid = p.ctid;
SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
EXPLAIN (COSTS OFF) SELECT sum(js.c) FROM jo JOIN js ON js.k = jo.k;
EXPLAIN (COSTS OFF) SELECT sum(t.b) FROM gpu_btree_probe('js_k', (SELECT array_agg(g % 50) FROM generate_series(1, 300) g)) p JOIN js t ON t.ctid = p.ctid;
SELECT * FROM jsums();
SELECT sum(t.c), sum(t.b), count(*) FROM gpu_btree_probe('js_k', ARRAY[1, 2]::int8[]) p JOIN js t ON t.ctid = p.ctid;
RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
-- Pages no longer all-visible: updated rows' chains, deleted rows.
UPDATE js SET c = c + 1 WHERE id % 13 = 0;
DELETE FROM js WHERE id % 17 = 0;
SELECT * FROM jsums();
DROP FUNCTION jsums();
DROP TABLE js;

-- gpuindex.enable_join = off: the planner's own joins only.
SET gpuindex.enable_join = off;
EXPLAIN (COSTS OFF) SELECT jo.id, ji.id FROM jo JOIN ji ON ji.k = jo.k;
RESET gpuindex.enable_join;
RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop;
DROP FUNCTION jsame(text);
DROP TABLE jo, ji;

-- gpuindex.batch_work_mem: a batch whose matches would pass it is searched
-- in pieces of fewer queries (same rows, same order of positions), through
-- the batch functions, the fused batch calls and the batched join; one
-- query that alone passes it raises an ERROR. (A hot key asked thousands
-- of times once grew a backend until the OOM killer ended it.)
SET client_min_messages = warning;
SET gpuindex.device = cpu;

-- Key 1 is held by 1000 rows, keys 2..2001 by one each. (No autovacuum:
-- the join's heap fetches below count pages not yet all-visible.)
CREATE TABLE bw (id int, k int8, s text, p point) WITH (autovacuum_enabled = off);
INSERT INTO bw SELECT g, CASE WHEN g <= 1000 THEN 1 ELSE g - 999 END,
  CASE WHEN g <= 1000 THEN 'hot' ELSE 'key' || g END,
  CASE WHEN g <= 1000 THEN point(0, 0) ELSE point(g % 97, g % 89) END
  FROM generate_series(1, 3000) g;
CREATE INDEX bw_b ON bw USING gpu_btree (k);
CREATE INDEX bw_l ON bw USING gpu_learned (k);
CREATE INDEX bw_a ON bw USING gpu_art (s COLLATE "C");
CREATE INDEX bw_p ON bw USING gpu_spatial (p);
ANALYZE bw;

-- 64 kB: 1365 matches. The arrays ask key 1 (or the hot point) 40 times
-- among other keys: 40,000+ matches, some 30 pieces.
SET gpuindex.batch_work_mem = 64;
CREATE TABLE bw_keys AS SELECT g AS ord, CASE WHEN g % 5 = 0 THEN 1 ELSE g * 7 % 2500 END::int8 AS k
  FROM generate_series(1, 200) g;

-- Each function's rows against the same rows found by SQL: equal; each
-- position's rows in heap order (where the rows have a ctid); and (by_ord)
-- grouped by ascending position, as the spatial functions return them
-- (the probes return all rows in heap order instead) without pieces.
CREATE FUNCTION bw_same(got text, want text) RETURNS TABLE (rows bigint, same boolean, heap_order boolean, by_ord boolean) AS $$
DECLARE a text[]; b text[]; h boolean; g boolean;
BEGIN
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', got) INTO a;
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', want) INTO b;
  EXECUTE format($f$SELECT coalesce(bool_and(c > prev), true) FROM
    (SELECT c, lag(c) OVER (PARTITION BY ord ORDER BY n) AS prev FROM
      (SELECT row_number() OVER () AS n, x.ord, (to_jsonb(x) ->> 'ctid')::tid AS c FROM (%s) x) y) z$f$, got) INTO h;
  EXECUTE format('SELECT coalesce(bool_and(ord >= prev), true) FROM
    (SELECT ord, lag(ord, 1, 0::bigint) OVER () AS prev FROM (%s) x) y', got) INTO g;
  RETURN QUERY SELECT coalesce(cardinality(a), 0)::bigint, a IS NOT DISTINCT FROM b, h, g;
END $$ LANGUAGE plpgsql;

SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys JOIN bw USING (k)$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_learned_probe('bw_l', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys JOIN bw USING (k)$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_art_probe('bw_a', (SELECT array_agg(CASE WHEN k = 1 THEN 'hot' ELSE 'key' || (k + 999) END ORDER BY ord) FROM bw_keys)) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys JOIN bw ON bw.s = CASE WHEN bw_keys.k = 1 THEN 'hot' ELSE 'key' || (bw_keys.k + 999) END$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpuindex_search('bw_b', '=(bigint,bigint)', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys JOIN bw USING (k)$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_spatial_range('bw_p', (SELECT array_agg(box(point(k % 3 - 1, 0), point(k % 3 + 40, k % 3 + 1)) ORDER BY ord) FROM bw_keys)) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys q JOIN bw ON bw.p <@ box(point(q.k % 3 - 1, 0), point(q.k % 3 + 40, q.k % 3 + 1))$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_spatial_within('bw_p', (SELECT array_agg(point(k % 4, 0) ORDER BY ord) FROM bw_keys), 2.5) p$q$,
  $q$SELECT ord, bw.ctid FROM bw_keys q JOIN bw ON bw.p <@ circle(point(q.k % 4, 0), 2.5)$q$);
-- gpu_spatial_join's batches of outer rows, in pieces.
CREATE TABLE bw_circles AS SELECT g AS id, circle(point(g % 3, 0), 2) AS c FROM generate_series(1, 50) g;
WITH got AS (SELECT * FROM gpu_spatial_join('bw_p', 'bw_circles', 'c')),
     want AS (SELECT o.ctid AS outer_ctid, t.ctid AS inner_ctid FROM bw_circles o JOIN bw t ON t.p <@ o.c)
SELECT (SELECT count(*) FROM got) AS rows, (SELECT count(*) FROM (TABLE got EXCEPT ALL TABLE want) e) AS extra,
       (SELECT count(*) FROM (TABLE want EXCEPT ALL TABLE got) m) AS missing;
-- Nearest: k rows a centre count (200 centres x 50 > 1365); the rows of
-- each centre are its own (distances equal the operator's).
SELECT * FROM bw_same(
  $q$SELECT p.ord, round(p.distance::numeric, 6) FROM gpu_spatial_knn('bw_p', (SELECT array_agg(point(k % 50, k % 30) ORDER BY ord) FROM bw_keys), 50) p$q$,
  $q$SELECT ord, round(d::numeric, 6) FROM bw_keys q CROSS JOIN LATERAL
     (SELECT p <-> point(q.k % 50, q.k % 30) AS d FROM bw ORDER BY 1 LIMIT 50) n$q$);
SELECT count(*), count(DISTINCT ord) FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys));

-- Fused calls (GpuIndexJoin runs the function's search in pieces).
EXPLAIN (COSTS OFF) SELECT count(*) FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p JOIN bw t ON t.ctid = p.ctid;
SELECT count(*), sum(p.ord * t.id) FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p JOIN bw t ON t.ctid = p.ctid;
SELECT count(*), sum(p.ord * t.id) FROM gpu_learned_probe('bw_l', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p JOIN bw t ON t.ctid = p.ctid;
SELECT count(*), sum(ord * id) FROM bw_keys JOIN bw USING (k);
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p JOIN bw t ON t.ctid = p.ctid;
-- In chunks smaller than a piece, and in a SubPlan searched again.
SET gpuindex.join_chunk = 500;
SELECT count(*), sum(p.ord * t.id) FROM gpu_btree_probe('bw_b', (SELECT array_agg(k ORDER BY ord) FROM bw_keys)) p JOIN bw t ON t.ctid = p.ctid;
SELECT n, (SELECT count(*) FROM gpu_btree_probe('bw_b', array_fill(1::int8, ARRAY[n])) p JOIN bw t ON t.ctid = p.ctid)
  FROM (VALUES (1), (3), (2)) v(n);
RESET gpuindex.join_chunk;

-- The batched join: a chunk's matches in pieces, each outer row's in one;
-- inner, left, semi and anti joins equal the planner's own.
CREATE TABLE bw_outer AS SELECT g AS id, CASE WHEN g % 4 = 0 THEN 1 WHEN g % 7 = 0 THEN 99999 ELSE g END::int8 AS k
  FROM generate_series(1, 300) g;
ANALYZE bw_outer;
CREATE FUNCTION bw_join(q text) RETURNS TABLE (gpu_join boolean, rows bigint, same boolean) AS $$
DECLARE a text[]; b text[]; plan text;
BEGIN
  SET LOCAL gpuindex.enable_join = on;
  SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL enable_nestloop = off;
  EXECUTE 'EXPLAIN (COSTS OFF) ' || q INTO plan;
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', q) INTO a;
  SET LOCAL gpuindex.enable_join = off;
  SET LOCAL enable_hashjoin = on; SET LOCAL enable_mergejoin = on; SET LOCAL enable_nestloop = on;
  EXECUTE format('SELECT array_agg(x::text ORDER BY x::text) FROM (%s) x', q) INTO b;
  RETURN QUERY SELECT plan LIKE '%GpuIndexJoin%', coalesce(cardinality(a), 0)::bigint, a IS NOT DISTINCT FROM b;
END $$ LANGUAGE plpgsql;
SELECT * FROM bw_join('SELECT o.id, t.id FROM bw_outer o JOIN bw t ON t.k = o.k');
-- Summed by the node, its rows read on their pages, piece by piece.
SELECT * FROM bw_join('SELECT sum(t.id), count(*) FROM bw_outer o JOIN bw t ON t.k = o.k');
SELECT * FROM bw_join('SELECT o.id, t.id FROM bw_outer o LEFT JOIN bw t ON t.k = o.k AND t.id % 3 = 0');
SELECT * FROM bw_join('SELECT o.id FROM bw_outer o WHERE EXISTS (SELECT 1 FROM bw t WHERE t.k = o.k)');
SELECT * FROM bw_join('SELECT o.id FROM bw_outer o WHERE NOT EXISTS (SELECT 1 FROM bw t WHERE t.k = o.k)');
SELECT * FROM bw_join('SELECT o.id, t.id FROM bw_outer o JOIN bw t ON t.p <@ box(point(o.k % 2, 0), point(o.k % 2 + 30, 1))');
SELECT * FROM bw_join('SELECT o.id, n.d FROM bw_outer o CROSS JOIN LATERAL
  (SELECT t.p <-> point(o.k % 50, 0) AS d FROM bw t ORDER BY t.p <-> point(o.k % 50, 0) LIMIT 50) n');
SET gpuindex.join_chunk = 40;
SELECT * FROM bw_join('SELECT o.id, t.id FROM bw_outer o LEFT JOIN bw t ON t.k = o.k AND t.id % 3 = 0');
RESET gpuindex.join_chunk;
-- (In one process: a parallel plan's counters depend on the workers' shares.)
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET max_parallel_workers_per_gather = 0;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM bw_outer o JOIN bw t ON t.k = o.k;
RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop; RESET max_parallel_workers_per_gather;

-- gpu_metric: balls through gpuindex_search in pieces (300 equal vectors).
CREATE TABLE bw_v (id int, v real[]);
INSERT INTO bw_v SELECT g, CASE WHEN g <= 300 THEN ARRAY[0, 0] ELSE ARRAY[g % 31, g % 17] END::real[]
  FROM generate_series(1, 1600) g;
CREATE INDEX bw_v_i ON bw_v USING gpu_metric (v);
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpuindex_search('bw_v_i', '<@(real[],l2_ball)', (SELECT array_agg(l2_ball(ARRAY[g % 3, 0]::real[], 1.5) ORDER BY g) FROM generate_series(1, 30) g)) p$q$,
  $q$SELECT g::bigint, bw_v.ctid FROM generate_series(1, 30) g JOIN bw_v ON bw_v.v <@ l2_ball(ARRAY[g % 3, 0]::real[], 1.5)$q$);
-- gpu_metric's own functions, in pieces.
CREATE TABLE bw_vq AS SELECT g AS ord, ARRAY[g % 3, g % 2]::real[] AS q FROM generate_series(1, 8) g;
SELECT * FROM bw_same(
  $q$SELECT p.ord, p.ctid FROM gpu_metric_within('bw_v_i', (SELECT array_agg(q ORDER BY ord) FROM bw_vq), 1.5) p$q$,
  $q$SELECT ord::bigint, bw_v.ctid FROM bw_vq JOIN bw_v ON bw_v.v <@ l2_ball(bw_vq.q, 1.5)$q$);
SELECT * FROM bw_same(
  $q$SELECT p.ord, round(p.distance::numeric, 5) FROM gpu_metric_knn('bw_v_i', (SELECT array_agg(q ORDER BY ord) FROM bw_vq), 300) p$q$,
  $q$SELECT ord::bigint, round(d::numeric, 5) FROM bw_vq CROSS JOIN LATERAL
     (SELECT bw_v.v <-> bw_vq.q AS d FROM bw_v ORDER BY 1 LIMIT 300) n$q$);

-- One query that alone passes the limit: an ERROR with a hint, from the
-- functions, the fused call and the join alike.
SET gpuindex.batch_work_mem = 64;
DELETE FROM bw_keys WHERE k <> 1;
INSERT INTO bw SELECT 5000 + g, 1, 'hot', point(0, 0) FROM generate_series(1, 1000) g;
SELECT count(*) FROM gpu_btree_probe('bw_b', ARRAY[1]::int8[]);
SELECT count(*) FROM gpu_learned_probe('bw_l', ARRAY[1]::int8[]) p JOIN bw t ON t.ctid = p.ctid;
SELECT count(*) FROM gpu_art_probe('bw_a', ARRAY['hot']);
SELECT count(*) FROM gpu_spatial_range('bw_p', ARRAY[box(point(-1, -1), point(1, 1))]);
SELECT count(*) FROM gpu_spatial_knn('bw_p', ARRAY[point(0, 0)], 1500);
SELECT count(*) FROM gpu_spatial_knn('bw_p', ARRAY[point(0, 0)], 1000000);
SELECT count(*) FROM gpu_metric_within('bw_v_i', ARRAY[0, 0]::real[], 100);
SELECT count(*) FROM gpu_metric_knn('bw_v_i', ARRAY[0, 0]::real[], 2000);
SET gpuindex.batch_work_mem = 128;
SELECT count(*) FROM gpu_metric_knn('bw_v_i', ARRAY[0, 0]::real[], 2000);
SET gpuindex.batch_work_mem = 64;
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;
SELECT count(*) FROM bw_keys JOIN bw USING (k);
RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop;
-- Within the limit again.
SET gpuindex.batch_work_mem = 128;
SELECT count(*) FROM gpu_btree_probe('bw_b', ARRAY[1, 1, 2]::int8[]);
-- A key held by far more rows than the limit: its entries are not all
-- gathered to find that out (each entry is at least one match, so the
-- leaf walk stops soon past the limit; it once gathered all of them).
INSERT INTO bw SELECT 10000 + g, 1, 'hot', NULL FROM generate_series(1, 40000) g;
REINDEX INDEX bw_l;
CREATE FUNCTION bw_stops(q text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN program_limit_exceeded THEN
  RETURN CASE WHEN substring(SQLERRM FROM 'at least (\d+)')::int < 5000 THEN 'stopped early' ELSE SQLERRM END;
END $f$;
SELECT bw_stops($q$SELECT count(*) FROM gpu_btree_probe('bw_b', ARRAY[2, 1, 3]::int8[])$q$),
       bw_stops($q$SELECT count(*) FROM gpu_learned_probe('bw_l', ARRAY[1]::int8[])$q$),
       bw_stops($q$SELECT count(*) FROM gpu_art_probe('bw_a', ARRAY['key1500', 'hot'])$q$);
SET gpuindex.batch_work_mem = 4096;
SELECT bw_stops($q$SELECT count(*) FROM gpu_btree_probe('bw_b', ARRAY[2, 1, 3]::int8[])$q$),
       (SELECT count(*) FROM gpu_learned_probe('bw_l', ARRAY[1]::int8[])),
       (SELECT count(*) FROM gpu_art_probe('bw_a', ARRAY['key1500', 'hot']));
SHOW gpuindex.batch_work_mem;
RESET gpuindex.batch_work_mem;
SHOW gpuindex.batch_work_mem;

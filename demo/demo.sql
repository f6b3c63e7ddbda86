-- gpuindex demo: what works so far, and which device ran it.
\set QUIET on
\pset footer off
CREATE EXTENSION gpuindex;

\echo
\echo '1. The GPU runtime: what was found (or why nothing was), kernels compiled by NVRTC in this backend'
\x on
SELECT * FROM gpuindex_device_info();
\x off
SHOW gpuindex.device;

\echo
\echo '2. A batch lookup: 200 000 probes into 1 000 000 sorted keys in one call'
\echo '   (gpuindex_lower_bound: for each probe, how many keys are smaller)'
CREATE TEMP TABLE keys AS SELECT (random() * 1e12)::bigint AS k FROM generate_series(1, 1000000);
CREATE TEMP TABLE probes AS SELECT i, (random() * 1e12)::bigint AS p FROM generate_series(1, 200000) i;
CREATE TEMP TABLE answer AS
  SELECT u.i, u.r
  FROM unnest(gpuindex_lower_bound((SELECT array_agg(k ORDER BY k) FROM keys),
                                   (SELECT array_agg(p ORDER BY i) FROM probes))) WITH ORDINALITY AS u(r, i);
SELECT function, queries, device, cpu_reason, round(millis::numeric, 1) AS millis FROM gpuindex_last_batch();

\echo 'checked against SQL on 100 random probes (expect 0 mismatches):'
SELECT count(*) FILTER (WHERE a.r <> (SELECT count(*) FROM keys WHERE k < p.p)) AS mismatches
FROM (SELECT * FROM probes ORDER BY random() LIMIT 100) p JOIN answer a USING (i);

\echo
\echo '3. The same batch forced onto the CPU: identical answers'
SET gpuindex.device = cpu;
SELECT count(*) FILTER (WHERE a.r IS DISTINCT FROM u.r) AS differences
FROM answer a
JOIN unnest(gpuindex_lower_bound((SELECT array_agg(k ORDER BY k) FROM keys),
                                 (SELECT array_agg(p ORDER BY i) FROM probes))) WITH ORDINALITY AS u(r, i) USING (i);
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
RESET gpuindex.device;

\echo
\echo '4. gpuindex.device = gpu: accepted where a GPU is usable, a clear ERROR where none is'
\set ON_ERROR_STOP off
SET gpuindex.device = gpu;
\set ON_ERROR_STOP on
SHOW gpuindex.device;
RESET gpuindex.device;

\echo
\echo '5. Bad input is an ERROR with a hint, never a crash'
\set ON_ERROR_STOP off
SELECT gpuindex_lower_bound(ARRAY[3, 1, 2]::bigint[], ARRAY[1]::bigint[]);
SELECT gpuindex_lower_bound(ARRAY[1, NULL]::bigint[], ARRAY[1]::bigint[]);
\set ON_ERROR_STOP on

\echo
\echo '6. gpu_btree: the hybrid CPU-GPU B+-tree as an index (500 000 rows)'
CREATE TABLE readings (id bigint, sensor int8, value float8);
INSERT INTO readings SELECT g, (g::int8 * 7919) % 100000, g / 10.0 FROM generate_series(1, 500000) g;
INSERT INTO readings VALUES (0, NULL, 0);
CREATE INDEX readings_sensor ON readings USING gpu_btree (sensor);
VACUUM ANALYZE readings;
SELECT level, pages, entries FROM gpu_btree_check('readings_sensor');
\echo 'a batch of 20 000 keys as = ANY(array): one batch through the mirror of the inner levels'
EXPLAIN (COSTS OFF) SELECT count(*) FROM readings WHERE sensor = ANY (ARRAY(SELECT g::int8 FROM generate_series(1, 20000) g));
SELECT count(*) FROM readings WHERE sensor = ANY (ARRAY(SELECT g::int8 FROM generate_series(1, 20000) g));
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
\echo 'ranges, ordered scans and NULLs, as with btree'
SELECT sensor, count(*) FROM readings WHERE sensor BETWEEN 10 AND 12 GROUP BY sensor ORDER BY sensor;
SELECT sensor FROM readings ORDER BY sensor DESC LIMIT 2;
SELECT count(*) FROM readings WHERE sensor IS NULL;
\echo 'the batch probe function: many keys in, (position, row) out'
SELECT p.ord, r.id, r.sensor FROM gpu_btree_probe('readings_sensor', ARRAY[42, 7, 99999]::int8[]) p
JOIN readings r ON r.ctid = p.ctid ORDER BY p.ord, r.id;
\echo 'inserts keep the index exact'
INSERT INTO readings SELECT g, g % 100, 0 FROM generate_series(600000, 650000) g;
SELECT count(*) AS via_index FROM readings WHERE sensor = ANY (ARRAY[5, 6]::int8[]);
SELECT level, pages, entries FROM gpu_btree_check('readings_sensor');
DROP TABLE readings;

\echo
\echo '6b. gpu_learned: the G-Learned index (a PGM model over packed pages; 300 000 timestamps)'
CREATE TABLE events (id bigint, at timestamptz);
INSERT INTO events SELECT g, timestamptz '2026-01-01 00:00+00' + (g * 7 + g % 13) * interval '1 second' FROM generate_series(1, 300000) g;
CREATE INDEX events_at ON events USING gpu_learned (at);
VACUUM ANALYZE events;
\echo 'the run: full pages, no inner pages; the model predicts every key within its epsilon'
SELECT part, level, pages, entries FROM gpu_learned_check('events_at');
SELECT pg_size_pretty(pg_relation_size('events_at')) AS size;
\echo 'a batch of 20 000 timestamps as = ANY(array): one batch of model predictions, then the pages'
SELECT count(*) FROM events WHERE at = ANY (ARRAY(SELECT timestamptz '2026-01-01 00:00+00' + (g * 7 + g % 13) * interval '1 second' FROM generate_series(1, 40000, 2) g));
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
\echo 'inserts go to the delta (a B-link tree), visible at once; scans merge both'
INSERT INTO events SELECT -g, timestamptz '2026-01-01 00:00+00' + (g * 7) * interval '1 second' FROM generate_series(1, 1000) g;
SELECT count(*) AS via_index FROM events WHERE at BETWEEN '2026-01-01 00:00+00' AND '2026-01-01 00:10+00';
SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
SELECT count(*) AS via_seqscan FROM events WHERE at BETWEEN '2026-01-01 00:00+00' AND '2026-01-01 00:10+00';
RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan;
SELECT part, level, entries FROM gpu_learned_check('events_at');
DROP TABLE events;

\echo
\echo '6c. gpu_art: variable-length keys (URLs as text in the C collation, 200 000 rows)'
CREATE TABLE pages (id int, url text COLLATE "C");
INSERT INTO pages SELECT g, 'https://www.site' || (g % 97) || '.org/' || (ARRAY['docs','blog','news'])[1 + g % 3] || '/item-' || g FROM generate_series(1, 200000) g;
CREATE INDEX pages_url ON pages USING gpu_art (url);
VACUUM ANALYZE pages;
SELECT level, pages, entries FROM gpu_art_check('pages_url');
\echo 'a prefix: LIKE becomes a range on the index (as ^@ does)'
EXPLAIN (COSTS OFF) SELECT count(*) FROM pages WHERE url LIKE 'https://www.site42.org/blog/%';
SELECT count(*) FROM pages WHERE url LIKE 'https://www.site42.org/blog/%';
\echo 'a batch of 10 000 URLs as = ANY(array): one lower-bound batch through the mirror (CuART), then each leaf once'
SELECT count(*) FROM pages WHERE url = ANY (ARRAY(SELECT 'https://www.site' || (g % 97) || '.org/' || (ARRAY['docs','blog','news'])[1 + g % 3] || '/item-' || g FROM generate_series(1, 200000, 20) g));
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
\echo 'ordered, index-only, both ways'
SELECT url FROM pages ORDER BY url DESC LIMIT 3;
DROP TABLE pages;

\echo
\echo '7. gpu_spatial: the G-PICS quadtree as an index on point (200 000 points)'
CREATE TABLE places (id int, p point);
SELECT setseed(0.5) \g /dev/null
INSERT INTO places SELECT g, point(random() * 1000, random() * 1000) FROM generate_series(1, 200000) g;
CREATE INDEX places_p ON places USING gpu_spatial (p);
VACUUM ANALYZE places;
SELECT nodes, leaves, tree_entries FROM gpu_spatial_check('places_p');
\echo 'the operators GiST answers, with the same rows: <@ box, <@ circle, ~=, ORDER BY <-> LIMIT'
EXPLAIN (COSTS OFF) SELECT count(*) FROM places WHERE p <@ box '(100,100),(110,110)';
SELECT count(*) AS in_box FROM places WHERE p <@ box '(100,100),(110,110)';
SELECT count(*) AS in_circle FROM places WHERE p <@ circle '((500,500),5)';
SELECT id, round((p <-> point '(250,250)')::numeric, 3) AS distance FROM places ORDER BY p <-> point '(250,250)' LIMIT 3;
\echo 'batch functions: 10 000 boxes in one call, every answer tagged with its box position'
CREATE TEMP TABLE qboxes AS
  SELECT array_agg(box(point(x, y), point(x + 5, y + 5)) ORDER BY i) AS b
  FROM (SELECT i, random() * 995 AS x, random() * 995 AS y FROM generate_series(1, 10000) i) s;
SELECT count(*) AS pairs, count(DISTINCT ord) AS boxes_with_hits
FROM gpu_spatial_range('places_p', (SELECT b FROM qboxes));
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
\echo 'checked against the same boxes through the index one by one (expect 0 differences):'
SELECT count(*) AS differences FROM (
  (SELECT r.ord, r.ctid FROM gpu_spatial_range('places_p', (SELECT b FROM qboxes)) r
   EXCEPT ALL
   SELECT q.ord, t.ctid FROM unnest((SELECT b FROM qboxes)) WITH ORDINALITY q(b, ord), LATERAL (SELECT ctid FROM places WHERE p <@ q.b) t)
  UNION ALL
  (SELECT q.ord, t.ctid FROM unnest((SELECT b FROM qboxes)) WITH ORDINALITY q(b, ord), LATERAL (SELECT ctid FROM places WHERE p <@ q.b) t
   EXCEPT ALL
   SELECT r.ord, r.ctid FROM gpu_spatial_range('places_p', (SELECT b FROM qboxes)) r)) d;
\echo 'the 3 nearest places of two points, and a spatial join (places within 0.5 of 100 others)'
SELECT ord, (SELECT id FROM places WHERE ctid = k.ctid) AS id, round(distance::numeric, 3) AS distance
FROM gpu_spatial_knn('places_p', ARRAY[point '(10,10)', point '(900,900)'], 3) k ORDER BY ord, distance;
CREATE TEMP TABLE visitors AS SELECT id, p FROM places WHERE id % 2000 = 0;
SELECT count(*) AS pairs FROM gpu_spatial_join('places_p', 'visitors', 'p', within => 0.5);
\echo 'inserts are visible at once (a WAL-logged delta, merged into the tree by the bulk update)'
INSERT INTO places SELECT 300000 + g, point(105, 105) FROM generate_series(1, 5) g;
SELECT count(*) AS in_box_now FROM places WHERE p <@ box '(100,100),(110,110)';
SELECT count(*) AS same_point FROM places WHERE p ~= point '(105,105)';
DROP TABLE places;

\echo '8. gpu_metric: the GTS pivot tree, exact nearest neighbours of real[] vectors (50 000 x 32, clustered)'
CREATE TABLE items (id int, v real[]);
SELECT setseed(0.25) \g /dev/null
CREATE TEMP TABLE centres AS SELECT c, array_agg(random() * 20 - 10 ORDER BY d) AS x
  FROM generate_series(1, 50) c, generate_series(1, 32) d GROUP BY c;
INSERT INTO items SELECT g, (SELECT array_agg((x[d] + (random() - 0.5))::real ORDER BY d) FROM generate_series(1, 32) d)
  FROM generate_series(1, 50000) g JOIN centres ON c = 1 + g % 50;
CREATE INDEX items_v ON items USING gpu_metric (v);            -- L2; real_l1_ops, real_cosine_ops too
VACUUM ANALYZE items;
CREATE TEMP TABLE q AS SELECT v FROM items WHERE id = 777;
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5;
SELECT id, round((v <-> (SELECT v FROM q))::numeric, 4) AS distance FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5;
\echo 'the same five by a sequential scan (expect the same ids and distances):'
SET enable_indexscan = off;
SELECT id, round((v <-> (SELECT v FROM q))::numeric, 4) AS distance FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5;
RESET enable_indexscan;
\echo 'rows within a distance (a ball) through the index, and by sequential scan:'
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM items WHERE v <@ l2_ball((SELECT v FROM q), 2.2);
SELECT count(*) FROM items WHERE v <@ l2_ball((SELECT v FROM q), 2.2);
RESET enable_seqscan;
SELECT count(*) FROM items WHERE v <-> (SELECT v FROM q) <= 2.2;
\echo 'a batch: the 3 nearest of 1 000 queries in one call (on the GPU when there is one), first two queries shown:'
CREATE TEMP TABLE qs AS SELECT array_agg(v ORDER BY id) AS a FROM (SELECT id, v FROM items WHERE id % 50 = 7 LIMIT 1000) s;
SELECT k.ord, t.id, round(k.distance::numeric, 4) AS distance
  FROM qs, gpu_metric_knn('items_v', qs.a, 3) k JOIN items t ON t.ctid = k.ctid WHERE k.ord <= 2 ORDER BY k.ord, k.distance, t.id;
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
\echo 'text by edit distance (w <~> q is levenshtein(w, q)): the nearest words to a typo, 20 000 made-up words'
CREATE TABLE words (id int, w text);
INSERT INTO words SELECT g, translate(substr(md5(g::text), 1, 4 + g % 6), '0123456789', 'aeioulnrst') FROM generate_series(1, 20000) g;
INSERT INTO words VALUES (0, 'receive'), (-1, 'recipe'), (-2, 'relieve');
CREATE INDEX words_w ON words USING gpu_metric (w) WITH (max_length = 16);
SELECT id, w, w <~> 'recieve' AS edits FROM words ORDER BY w <~> 'recieve', id LIMIT 3;
SELECT k.ord, t.w, k.distance FROM gpu_metric_knn_text('words_w', ARRAY['recieve', 'eaisl'], 2) k
  JOIN words t ON t.ctid = k.ctid ORDER BY k.ord, k.distance, t.w;

\echo
\echo '9. The batched index join: plain SQL joins and LATERAL top-k queries sent to the index a chunk at a time'
CREATE TABLE orders (id int, customer int8);
INSERT INTO orders SELECT g, (g * 7919) % 60000 FROM generate_series(1, 100000) g;
CREATE TABLE customers (id int8, name text);
INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 50000) g;
CREATE INDEX customers_id ON customers USING gpu_btree (id);
ANALYZE orders; ANALYZE customers;
\echo 'an equi-join: the planner weighs GpuIndexJoin by cost; with 50 000 customers it keeps its hash join:'
EXPLAIN (COSTS OFF) SELECT count(*) FROM orders JOIN customers ON customers.id = orders.customer;
\echo 'with the built-in joins turned off: one batch of probes for the chunk of 100 000 orders:'
SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM orders JOIN customers ON customers.id = orders.customer;
SELECT count(*), sum(length(name)) FROM orders JOIN customers ON customers.id = orders.customer;
\echo 'the same answer with gpuindex.enable_join = off (the built-in join):'
RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop;
SET gpuindex.enable_join = off;
SELECT count(*), sum(length(name)) FROM orders JOIN customers ON customers.id = orders.customer;
RESET gpuindex.enable_join;
\echo 'the 3 nearest items of 1 000 query vectors, as a LATERAL subquery (one nearest batch for all of them):'
CREATE TEMP TABLE lookups AS SELECT id AS qid, v AS q FROM items WHERE id % 50 = 7 LIMIT 1000;
ANALYZE lookups;
EXPLAIN (COSTS OFF) SELECT l.qid, s.id, s.d FROM lookups l
  CROSS JOIN LATERAL (SELECT id, v <-> l.q AS d FROM items ORDER BY v <-> l.q LIMIT 3) s;
SELECT l.qid, s.id, round(s.d::numeric, 4) AS distance FROM lookups l
  CROSS JOIN LATERAL (SELECT id, v <-> l.q AS d FROM items ORDER BY v <-> l.q LIMIT 3) s
  WHERE l.qid < 120 ORDER BY l.qid, s.d, s.id;
\echo
\echo '10. The GPU service: one background worker owns the GPU; searches of all sessions become one batch per epoch'
SELECT running, device FROM gpuindex_service_stats();
\echo 'a kNN index scan sent to the service (gpuindex.service = on; auto does so when the service has a GPU and the trip pays by cost):'
SET gpuindex.service = on;
SELECT id, round((v <-> (SELECT v FROM q))::numeric, 4) AS distance FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5;
SELECT function, device, service IS NOT NULL AS by_the_service FROM gpuindex_last_batch();
\echo 'EXPLAIN ANALYZE ends with what the statement asked of the service:'
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT id FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5;
RESET gpuindex.service;
SELECT requests > 0 AS served, loads, images, busy_slots, declined FROM gpuindex_service_stats();

DROP TABLE items, orders, customers;

\echo
\echo '11. pgvector: gpu_metric on its vector type with its own operators (extension gpuindex_pgvector)'
SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector') AS has_pgvector \gset
\if :has_pgvector
CREATE EXTENSION gpuindex_pgvector CASCADE;
CREATE TABLE docs (id int, embedding vector(16));
SELECT setseed(0.5) \gset
INSERT INTO docs SELECT g, ARRAY(SELECT random() - 0.5 FROM generate_series(1, 16) WHERE g > 0)::vector FROM generate_series(1, 20000) g;
CREATE INDEX ON docs USING gpu_metric (embedding vector_cosine_ops);
ANALYZE docs;
\echo 'an unchanged pgvector query uses the index; the executor rechecks pgvector''s own float4 distances:'
EXPLAIN (COSTS OFF) SELECT id FROM docs ORDER BY embedding <=> (SELECT embedding FROM docs WHERE id = 7) LIMIT 5;
SELECT id, round((embedding <=> (SELECT embedding FROM docs WHERE id = 7))::numeric, 6) AS distance
  FROM docs ORDER BY embedding <=> (SELECT embedding FROM docs WHERE id = 7) LIMIT 5;
\echo 'the same five by a sequential scan:'
SET enable_indexscan = off;
SELECT id, round((embedding <=> (SELECT embedding FROM docs WHERE id = 7))::numeric, 6) AS distance
  FROM docs ORDER BY embedding <=> (SELECT embedding FROM docs WHERE id = 7) LIMIT 5;
RESET enable_indexscan;
DROP TABLE docs;
DROP EXTENSION gpuindex_pgvector;
\else
\echo '(pgvector is not installed here: CREATE EXTENSION gpuindex_pgvector needs it)'
\endif

\echo
\echo 'Not built yet: see each index'"'"'s "Does not (yet)" in README.md.'


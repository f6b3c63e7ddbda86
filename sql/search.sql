-- gpuindex_search / gpuindex_nearest: a batch through any gpuindex index,
-- by operator. Each equals the SELECT with the same operator (and the
-- per-type batch function); errors for operators, types and indexes the
-- batch does not answer.
SET client_min_messages = warning;
SET gpuindex.device = cpu;

-- Skewed keys (a value repeated 500 times), NULLs, and points with
-- duplicates and a far outlier.
CREATE TABLE sr (id int, k bigint, p point);
INSERT INTO sr SELECT g, CASE WHEN g % 4 = 0 THEN 7 ELSE (g * 7919) % 1013 END,
  point((g * 37) % 101, (g * 53) % 97) FROM generate_series(1, 2000) g;
INSERT INTO sr VALUES (3001, NULL, NULL), (3002, 5, point(1e300, -1e300));
CREATE INDEX sr_k ON sr USING gpu_btree (k);
CREATE INDEX sr_p ON sr USING gpu_spatial (p);
CREATE INDEX sr_plain ON sr (id);

-- Equality probes, NULL and missing keys included: ord and ctid equal the
-- join of the array with the table.
WITH q AS (SELECT ARRAY[7, 5, NULL, 100000, 12, 7]::bigint[] AS a),
got AS (SELECT s.ord, s.ctid FROM q, gpuindex_search('sr_k', '=(bigint,bigint)', q.a) s),
want AS (SELECT u.ord, sr.ctid FROM q, unnest(q.a) WITH ORDINALITY u(v, ord) JOIN sr ON sr.k = u.v)
SELECT (SELECT count(*) FROM got) AS n,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x) AS extra,
  (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x) AS missing,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL
     SELECT p.ord, p.ctid FROM q, gpu_btree_probe('sr_k', q.a) p) x) AS differs_from_probe;

-- Boxes, circles and ~= through gpu_spatial.
WITH q AS (SELECT array_agg(box(point(g, g), point(g + 9, g + 14)) ORDER BY g) AS a FROM generate_series(0, 90, 3) g),
got AS (SELECT s.ord, s.ctid FROM q, gpuindex_search('sr_p', '<@(point,box)', q.a) s),
want AS (SELECT u.ord, sr.ctid FROM q, unnest(q.a) WITH ORDINALITY u(b, ord) JOIN sr ON sr.p <@ u.b)
SELECT 'box' AS q, (SELECT count(*) FROM got) AS n,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x) AS extra,
  (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x) AS missing;
WITH q AS (SELECT array_agg(circle(point(g, 100 - g), 6) ORDER BY g) AS a FROM generate_series(0, 90, 5) g),
got AS (SELECT s.ord, s.ctid FROM q, gpuindex_search('sr_p', '<@(point,circle)', q.a) s),
want AS (SELECT u.ord, sr.ctid FROM q, unnest(q.a) WITH ORDINALITY u(c, ord) JOIN sr ON sr.p <@ u.c)
SELECT 'circle' AS q, (SELECT count(*) FROM got) AS n,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x) AS extra,
  (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x) AS missing;
WITH q AS (SELECT ARRAY[point(37, 53), point(1e300, -1e300), point(0.5, 0.5)] AS a),
got AS (SELECT s.ord, s.ctid FROM q, gpuindex_search('sr_p', '~=(point,point)', q.a) s),
want AS (SELECT u.ord, sr.ctid FROM q, unnest(q.a) WITH ORDINALITY u(c, ord) JOIN sr ON sr.p ~= u.c)
SELECT 'same' AS q, (SELECT count(*) FROM got) AS n,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x) AS extra,
  (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x) AS missing;

-- The k nearest: the same rows, ranks and distances as gpu_spatial_knn,
-- and the distances of ORDER BY <-> LIMIT k.
WITH q AS (SELECT ARRAY[point(10, 10), point(50, 50), point(-1e6, 0)] AS a),
got AS (SELECT s.ord, s.ctid, s.distance FROM q, gpuindex_nearest('sr_p', '<->(point,point)', q.a, 5) s),
knn AS (SELECT s.ord, s.ctid, s.distance FROM q, gpu_spatial_knn('sr_p', q.a, 5) s),
want AS (SELECT u.ord, d.distance FROM q, unnest(q.a) WITH ORDINALITY u(c, ord),
         LATERAL (SELECT sr.p <-> u.c AS distance FROM sr WHERE sr.p IS NOT NULL ORDER BY 1 LIMIT 5) d)
SELECT (SELECT count(*) FROM got) AS n,
  (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM knn) x) AS differs_from_knn,
  (SELECT count(*) FROM (SELECT ord, distance FROM got EXCEPT ALL SELECT * FROM want) x) AS wrong_distances;

-- An empty batch.
SELECT count(*) FROM gpuindex_search('sr_k', '=(bigint,bigint)', ARRAY[]::bigint[]);

-- Errors.
SELECT * FROM gpuindex_search('sr_k', '<(bigint,bigint)', ARRAY[1]::bigint[]);
SELECT * FROM gpuindex_search('sr_k', '=(integer,integer)', ARRAY[1]::int[]);
SELECT * FROM gpuindex_search('sr_k', '=(bigint,bigint)', ARRAY[1]::int[]);
SELECT * FROM gpuindex_search('sr_p', '<->(point,point)', ARRAY[point(1, 1)]);
SELECT * FROM gpuindex_nearest('sr_p', '<@(point,box)', ARRAY[box '(0,0),(1,1)'], 3);
SELECT * FROM gpuindex_nearest('sr_p', '<->(point,point)', ARRAY[point(1, 1)], 0);
SELECT * FROM gpuindex_nearest('sr_p', '<->(point,point)', ARRAY[point('NaN', 1)], 3);
SELECT * FROM gpuindex_search('sr_plain', '=(integer,integer)', ARRAY[1]);
SELECT * FROM gpuindex_search('sr', '=(integer,integer)', ARRAY[1]);

-- The privilege guard of every batch function.
CREATE ROLE regress_gpuindex_search;
SET ROLE regress_gpuindex_search;
SELECT * FROM gpuindex_search('sr_k', '=(bigint,bigint)', ARRAY[1]::bigint[]);
SELECT * FROM gpuindex_nearest('sr_p', '<->(point,point)', ARRAY[point(1, 1)], 3);
RESET ROLE;
DROP ROLE regress_gpuindex_search;

DROP TABLE sr;

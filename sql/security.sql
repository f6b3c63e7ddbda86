-- Batch functions obey PostgreSQL's privileges, row-level security and
-- ownership: no function returns a TID, distance or count of a row that
-- the same role could not read with a SELECT; merges need ownership;
-- check functions are revoked from PUBLIC.
SET client_min_messages = warning;
SET gpuindex.device = cpu;
\set VERBOSITY default

CREATE ROLE regress_gpuindex_owner;
CREATE ROLE regress_gpuindex_none;
CREATE ROLE regress_gpuindex_cols;
CREATE ROLE regress_gpuindex_rls;
GRANT CREATE ON SCHEMA public TO regress_gpuindex_owner;

SET ROLE regress_gpuindex_owner;
-- 5,000 rows; the policy below shows regress_gpuindex_rls the 10 rows with id <= 10.
CREATE TABLE sec (id int, k int8, p point, secret text, v real[]);
INSERT INTO sec SELECT g, g % 500, point(g % 100, g / 100), 'secret ' || g, ARRAY[g % 100, g / 100] FROM generate_series(1, 5000) g;
CREATE INDEX sec_k ON sec USING gpu_btree (k);
CREATE INDEX sec_p ON sec USING gpu_spatial (p) WITH (leaf_capacity = 64);
CREATE INDEX sec_v ON sec USING gpu_metric (v);
CREATE TABLE sec_outer (id int, q point);
INSERT INTO sec_outer VALUES (1, point(5, 0)), (2, point(50, 25)), (3, point(2, 0));
GRANT SELECT (k) ON sec TO regress_gpuindex_cols;
GRANT SELECT ON sec, sec_outer TO regress_gpuindex_rls;
RESET ROLE;

-- No privileges: every function is refused before reading anything.
SET ROLE regress_gpuindex_none;
SELECT * FROM gpu_btree_probe('sec_k', ARRAY[1]::int8[]);
SELECT * FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)']);
SELECT * FROM gpu_spatial_within('sec_p', ARRAY[circle '((5,5),3)']);
SELECT * FROM gpu_spatial_within('sec_p', ARRAY[point '(5,5)'], 3);
SELECT * FROM gpu_spatial_knn('sec_p', ARRAY[point '(5,5)'], 3);
SELECT * FROM gpu_spatial_join('sec_p', 'sec_outer', 'q', within => 3);
SELECT * FROM gpu_metric_knn('sec_v', '{5,5}', 3);
SELECT * FROM gpu_metric_within('sec_v', '{5,5}', 3);
SELECT gpu_spatial_merge('sec_p');
SELECT * FROM gpu_btree_check('sec_k');
SELECT * FROM gpu_spatial_check('sec_p');
RESET ROLE;

-- SELECT on the indexed column only: what an index scan on that column
-- may read, and nothing through an index on another column.
SET ROLE regress_gpuindex_cols;
SELECT count(*) FROM gpu_btree_probe('sec_k', ARRAY[7]::int8[]);
SELECT count(*) FROM sec WHERE k = 7;
SELECT * FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)']);
SELECT ctid FROM sec WHERE k = 7;
RESET ROLE;

SET ROLE regress_gpuindex_owner;
ALTER TABLE sec ENABLE ROW LEVEL SECURITY;
CREATE POLICY sec_few ON sec FOR SELECT TO regress_gpuindex_rls USING (id <= 10);
-- The owner (no FORCE) and a superuser see every row.
SELECT count(*) FROM gpu_btree_probe('sec_k', ARRAY(SELECT generate_series(0, 20))::int8[]);
SELECT count(*) FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)']);
RESET ROLE;
-- Policies are applied by a query of ctids, which column privileges do
-- not cover: a clear ERROR for such a role, where a SELECT sees its rows
-- (here none: no policy names it).
SET ROLE regress_gpuindex_cols;
SELECT count(*) FROM gpu_btree_probe('sec_k', ARRAY[7]::int8[]);
SELECT count(*) FROM sec WHERE k = 7;
RESET ROLE;

-- Row-level security: each function returns exactly the rows the same
-- query returns through a SELECT by that role (10 of 5,000).
SET ROLE regress_gpuindex_rls;
SELECT count(*) AS visible_rows FROM sec;
CREATE TEMP TABLE got AS
          SELECT 'probe' AS f, ord, ctid AS tid, NULL::float8 AS d FROM gpu_btree_probe('sec_k', ARRAY(SELECT generate_series(0, 20))::int8[])
UNION ALL SELECT 'range', ord, ctid, NULL FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)', box '(3,0),(4,1)'])
UNION ALL SELECT 'within circles', ord, ctid, NULL FROM gpu_spatial_within('sec_p', ARRAY[circle '((5,5),6)'])
UNION ALL SELECT 'within points', ord, ctid, NULL FROM gpu_spatial_within('sec_p', ARRAY[point '(5,5)', point '(40,40)'], 6)
UNION ALL SELECT 'knn', ord, ctid, distance FROM gpu_spatial_knn('sec_p', ARRAY[point '(50,25)', point '(1,0)'], 3)
UNION ALL SELECT 'metric knn', ord, ctid, distance FROM gpu_metric_knn('sec_v', '{{50,25},{1,0}}', 3)
UNION ALL SELECT 'metric within', ord, ctid, distance FROM gpu_metric_within('sec_v', '{{5,0}}', 2.5);
CREATE TEMP TABLE want AS
          SELECT 'probe' AS f, q.ord, s.ctid AS tid, NULL::float8 AS d FROM unnest(ARRAY(SELECT generate_series(0, 20))::int8[]) WITH ORDINALITY q(k, ord) JOIN sec s ON s.k = q.k
UNION ALL SELECT 'range', q.ord, s.ctid, NULL FROM unnest(ARRAY[box '(0,0),(20,20)', box '(3,0),(4,1)']) WITH ORDINALITY q(b, ord) JOIN sec s ON s.p <@ q.b
UNION ALL SELECT 'within circles', 1, ctid, NULL FROM sec WHERE p <@ circle '((5,5),6)'
UNION ALL SELECT 'within points', q.ord, s.ctid, NULL FROM unnest(ARRAY[point '(5,5)', point '(40,40)']) WITH ORDINALITY q(c, ord) JOIN sec s ON s.p <@ circle(q.c, 6)
UNION ALL SELECT 'knn', q.ord, n.ctid, n.d FROM unnest(ARRAY[point '(50,25)', point '(1,0)']) WITH ORDINALITY q(c, ord)
  CROSS JOIN LATERAL (SELECT ctid, p <-> q.c AS d FROM sec ORDER BY p <-> q.c, ctid LIMIT 3) n
UNION ALL SELECT 'metric knn', q.ord, n.ctid, n.d FROM (VALUES (1, '{50,25}'::real[]), (2, '{1,0}')) q(ord, v)
  CROSS JOIN LATERAL (SELECT ctid, sec.v <-> q.v AS d FROM sec ORDER BY sec.v <-> q.v, ctid LIMIT 3) n
UNION ALL SELECT 'metric within', 1, ctid, v <-> '{5,0}' FROM sec WHERE v <-> '{5,0}' <= 2.5;
SELECT f, count(*) AS rows,
       (SELECT count(*) FROM ((SELECT ord, tid, d FROM got g WHERE g.f = w.f) EXCEPT ALL (SELECT ord, tid, d FROM want x WHERE x.f = w.f)) e) AS extra,
       (SELECT count(*) FROM ((SELECT ord, tid, d FROM want x WHERE x.f = w.f) EXCEPT ALL (SELECT ord, tid, d FROM got g WHERE g.f = w.f)) e) AS missing
  FROM want w GROUP BY f ORDER BY f;
-- The join: the policy hides inner rows (and the outer table has none).
SELECT o.id, s.id FROM gpu_spatial_join('sec_p', 'sec_outer', 'q', within => 2) j
  JOIN sec_outer o ON o.ctid = j.outer_ctid JOIN sec s ON s.ctid = j.inner_ctid ORDER BY 1, 2;
SELECT o.id, s.id FROM sec_outer o JOIN sec s ON s.p <@ circle(o.q, 2) ORDER BY 1, 2;
-- With row_security = off a query the policies would affect is an ERROR.
SET row_security = off;
SELECT * FROM gpu_btree_probe('sec_k', ARRAY[1]::int8[]);
SELECT * FROM gpu_spatial_knn('sec_p', ARRAY[point '(5,5)'], 3);
RESET row_security;
-- Not the owner.
SELECT gpu_spatial_merge('sec_p');
DROP TABLE got, want;
RESET ROLE;

-- FORCE ROW LEVEL SECURITY applies the policies to the owner too: no
-- policy names the owner, so it sees nothing.
ALTER TABLE sec FORCE ROW LEVEL SECURITY;
SET ROLE regress_gpuindex_owner;
SELECT count(*) FROM sec;
SELECT count(*) FROM gpu_btree_probe('sec_k', ARRAY(SELECT generate_series(0, 20))::int8[]);
SELECT count(*) FROM gpu_spatial_knn('sec_p', ARRAY[point '(5,5)'], 3);
RESET ROLE;
ALTER TABLE sec NO FORCE ROW LEVEL SECURITY;
-- The owner may merge, and the merge changes no answer.
SET ROLE regress_gpuindex_owner;
INSERT INTO sec SELECT 10000 + g, g, point(g, 0), 'new' FROM generate_series(1, 5) g;
SELECT count(*) FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)']);
SELECT gpu_spatial_merge('sec_p');
SELECT count(*) FROM gpu_spatial_range('sec_p', ARRAY[box '(0,0),(20,20)']);
RESET ROLE;

-- Check functions: granted deliberately, then allowed.
GRANT EXECUTE ON FUNCTION gpu_btree_check(regclass), gpu_spatial_check(regclass) TO regress_gpuindex_none;
SET ROLE regress_gpuindex_none;
SELECT level, entries FROM gpu_btree_check('sec_k') ORDER BY level;
SELECT tree_entries + chain_entries AS entries FROM gpu_spatial_check('sec_p');
RESET ROLE;

-- Wrong relations.
SELECT * FROM gpu_btree_probe('sec', ARRAY[1]::int8[]);
SELECT * FROM gpu_spatial_range('sec_k', ARRAY[box '(0,0),(1,1)']);
SELECT gpu_spatial_merge('sec_k');
-- A partitioned index has no entries of its own; a partitioned outer
-- table's rows are its partitions'.
CREATE TABLE sec_parts (id int, k int8, p point) PARTITION BY RANGE (id);
CREATE TABLE sec_part1 PARTITION OF sec_parts FOR VALUES FROM (0) TO (100);
INSERT INTO sec_parts SELECT g, g, point(g, g) FROM generate_series(0, 99) g;
CREATE INDEX sec_parts_k ON sec_parts USING gpu_btree (k);
CREATE INDEX sec_parts_p ON sec_parts USING gpu_spatial (p);
SELECT * FROM gpu_btree_probe('sec_parts_k', ARRAY[1]::int8[]);
SELECT * FROM gpu_btree_check('sec_parts_k');
SELECT * FROM gpu_spatial_knn('sec_parts_p', ARRAY[point(1, 1)], 3);
ALTER INDEX sec_parts_p RENAME TO "Sec's parts";
SELECT * FROM gpu_spatial_range('"Sec''s parts"', ARRAY[box '(0,0),(1,1)']);
SELECT count(*) FROM pg_partition_tree('public."Sec''s parts"') WHERE isleaf;
SELECT count(*) FROM gpu_spatial_knn('sec_part1_p_idx', ARRAY[point(1, 1)], 3);
SELECT * FROM gpu_spatial_join('sec_part1_p_idx', 'sec_parts', 'p', within => 1);
SELECT count(*) FROM gpu_spatial_join('sec_part1_p_idx', 'sec_part1', 'p', within => 1);
CREATE VIEW sec_parts_v AS SELECT * FROM sec_part1;
SELECT * FROM gpu_spatial_join('sec_part1_p_idx', 'sec_parts_v', 'p', within => 1);
DROP VIEW sec_parts_v;
DROP TABLE sec_parts;

-- A call's row estimate uses the column's statistics only for a role the
-- planner would let use them (SELECT on the table or the column, no row
-- security): 2 keys x 500 rows a value, else one a key.
SET ROLE regress_gpuindex_owner;
CREATE TABLE sec_est AS SELECT g AS id, (g % 10)::int8 AS k FROM generate_series(1, 5000) g;
CREATE INDEX sec_est_k ON sec_est USING gpu_btree (k);
ANALYZE sec_est;
GRANT SELECT (k) ON sec_est TO regress_gpuindex_cols;
CREATE FUNCTION sec_rows() RETURNS text AS $$
DECLARE line text;
BEGIN
  FOR line IN EXECUTE 'EXPLAIN SELECT * FROM gpu_btree_probe(''sec_est_k'', ARRAY[1, 2]::int8[])' LOOP
    RETURN substring(line from 'rows=([0-9]+)');
  END LOOP;
END $$ LANGUAGE plpgsql;
GRANT EXECUTE ON FUNCTION sec_rows() TO PUBLIC;
SELECT sec_rows() AS owner;
SET ROLE regress_gpuindex_none;
SELECT sec_rows() AS no_privilege;
SET ROLE regress_gpuindex_cols;
SELECT sec_rows() AS column_privilege;
SET ROLE regress_gpuindex_owner;
ALTER TABLE sec_est ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON sec_est TO regress_gpuindex_rls;
SET ROLE regress_gpuindex_rls;
SELECT sec_rows() AS row_security;
SET ROLE regress_gpuindex_owner;
DROP FUNCTION sec_rows();
DROP TABLE sec_est;
RESET ROLE;

DROP TABLE sec, sec_outer;
REVOKE CREATE ON SCHEMA public FROM regress_gpuindex_owner;
REVOKE ALL ON FUNCTION gpu_btree_check(regclass), gpu_spatial_check(regclass) FROM regress_gpuindex_none;
DROP ROLE regress_gpuindex_owner, regress_gpuindex_none, regress_gpuindex_cols, regress_gpuindex_rls;

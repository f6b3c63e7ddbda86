-- Unlogged indexes: the init fork is the same build with no rows (a
-- metapage and empty pages), TRUNCATE rebuilds from it, scans and checks
-- work before and after.
SET client_min_messages = warning;
SET gpuindex.device = cpu;
CREATE UNLOGGED TABLE ul (k int8, p point);
CREATE INDEX ul_k ON ul USING gpu_btree (k);
CREATE INDEX ul_p ON ul USING gpu_spatial (p);
CREATE INDEX ul_kl ON ul USING gpu_learned (k);
SELECT c.relname, pg_relation_size(c.oid, 'init') / current_setting('block_size')::int AS init_pages
  FROM pg_class c WHERE c.relname IN ('ul_k', 'ul_p', 'ul_kl') ORDER BY 1;
INSERT INTO ul SELECT g, point(g % 100, g / 100) FROM generate_series(1, 20000) g;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM ul WHERE k BETWEEN 100 AND 199;
SELECT count(*) FROM ul WHERE p <@ box '(10,10),(19,19)';
TRUNCATE ul;
SELECT c.relname, pg_relation_size(c.oid, 'init') / current_setting('block_size')::int AS init_pages
  FROM pg_class c WHERE c.relname IN ('ul_k', 'ul_p', 'ul_kl') ORDER BY 1;
SELECT count(*) FROM ul WHERE k BETWEEN 100 AND 199;
INSERT INTO ul SELECT g, point(g % 50, g / 50) FROM generate_series(1, 5000) g;
SELECT count(*) FROM ul WHERE k BETWEEN 100 AND 199;
SELECT count(*) FROM ul WHERE p <@ box '(10,10),(19,19)';
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT level, entries FROM gpu_btree_check('ul_k') ORDER BY level;
SELECT part, level, entries FROM gpu_learned_check('ul_kl') ORDER BY part, level;
DROP INDEX ul_k;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM ul WHERE k BETWEEN 100 AND 199;
RESET enable_seqscan; RESET enable_bitmapscan;
SELECT tree_entries + chain_entries AS entries FROM gpu_spatial_check('ul_p');
DROP TABLE ul;

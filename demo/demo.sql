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
\echo 'Not built yet: gpu_learned, gpu_art, gpu_metric, gpu_spatial, the batched join, the GPU service; see README.md.'

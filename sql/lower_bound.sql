-- gpuindex_lower_bound: for each probe, how many elements of the sorted
-- array are smaller. Same answers on every device.

SELECT gpuindex_lower_bound(ARRAY[10, 20, 20, 30]::bigint[], ARRAY[5, 10, 15, 20, 25, 30, 35]::bigint[]);
-- empty arrays
SELECT gpuindex_lower_bound('{}'::bigint[], ARRAY[1, 2]::bigint[]);
SELECT gpuindex_lower_bound(ARRAY[1, 2]::bigint[], '{}'::bigint[]);
-- the extremes of bigint
SELECT gpuindex_lower_bound(ARRAY[-9223372036854775808, -1, 0, 9223372036854775807]::bigint[],
                            ARRAY[-9223372036854775808, -9223372036854775807, -1, 0, 1, 9223372036854775807]::bigint[]);
-- all keys equal
SELECT gpuindex_lower_bound(ARRAY[7, 7, 7]::bigint[], ARRAY[6, 7, 8]::bigint[]);
-- STRICT: a NULL argument gives NULL
SELECT gpuindex_lower_bound(NULL, ARRAY[1]::bigint[]) IS NULL AS is_null;

-- errors
SELECT gpuindex_lower_bound(ARRAY[1, 3, 2]::bigint[], ARRAY[1]::bigint[]);
SELECT gpuindex_lower_bound(ARRAY[1, NULL, 2]::bigint[], ARRAY[1]::bigint[]);
SELECT gpuindex_lower_bound(ARRAY[1, 2]::bigint[], ARRAY[NULL]::bigint[]);

-- differential, random data with duplicates, on each device setting: every
-- answer equals a count computed by SQL
SELECT setseed(0.42);
CREATE TEMP TABLE k AS SELECT (random() * 2000)::bigint - 1000 AS k FROM generate_series(1, 5000);
CREATE TEMP TABLE p AS SELECT i, (random() * 2400)::bigint - 1200 AS p FROM generate_series(1, 3000) i;
CREATE TEMP TABLE want AS SELECT i, (SELECT count(*) FROM k WHERE k.k < p.p) AS r FROM p;
CREATE FUNCTION lb_got() RETURNS TABLE (i bigint, r bigint) LANGUAGE sql AS $$
  SELECT u.i, u.r FROM unnest(gpuindex_lower_bound((SELECT array_agg(k ORDER BY k) FROM k),
                                                   (SELECT array_agg(p ORDER BY i) FROM p))) WITH ORDINALITY AS u(r, i)
$$;
SET gpuindex.device = cpu;
SELECT count(*) AS rows, count(*) FILTER (WHERE w.r IS DISTINCT FROM g.r) AS wrong FROM want w FULL JOIN lb_got() g USING (i);
SELECT function, queries, device, cpu_reason FROM gpuindex_last_batch();
SET gpuindex.device = auto;
SET gpuindex.gpu_min_batch = 1;
SELECT count(*) AS rows, count(*) FILTER (WHERE w.r IS DISTINCT FROM g.r) AS wrong FROM want w FULL JOIN lb_got() g USING (i);
RESET gpuindex.gpu_min_batch;
SET gpuindex.gpu_min_batch = 1000000;
SELECT count(*) AS rows, count(*) FILTER (WHERE w.r IS DISTINCT FROM g.r) AS wrong FROM want w FULL JOIN lb_got() g USING (i);
SELECT device, cpu_reason FROM gpuindex_last_batch();
RESET gpuindex.gpu_min_batch;
DROP FUNCTION lb_got();

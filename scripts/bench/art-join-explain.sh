#!/bin/bash
# Copy next to a bundle folder `pg` with bundle-server.sh and run after
# art-lookups-ab.sh (its data kept): where gpu_art's 128K-key batches
# spend their time (EXPLAIN ANALYZE: the join as written, the probe
# function joined back by ctid, the function alone), the keys passed as
# the bench passes them (a text[] parameter cast to uuid[]).
cd "$(dirname "$0")"
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
FRESH=0 source ./bundle-server.sh
$P -c "SELECT pg_prewarm('bu'), pg_prewarm('bu_a')" >/dev/null
$P <<SQL 2>&1 | grep -vE "^ *(Join Type|Chunk Size|Device|Rows Removed|Inner Rows|Probe:|Index:|Function Call)"
BEGIN; DROP INDEX bu_b; DROP INDEX bu_h; SET LOCAL jit = off;
SELECT a::text AS arr FROM keys128 \\gset
PREPARE j(text[]) AS SELECT count(*) FROM unnest(\$1::uuid[]) u(k) JOIN bu t ON t.k = u.k;
PREPARE p(text[]) AS SELECT count(*) FROM gpu_art_probe('bu_a', \$1::uuid[]) p JOIN bu t ON t.ctid = p.ctid;
PREPARE f(text[]) AS SELECT count(*) FROM gpu_art_probe('bu_a', \$1::uuid[]) p;
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE j(:'arr');
EXPLAIN (ANALYZE) EXECUTE j(:'arr');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE p(:'arr');
EXPLAIN (ANALYZE) EXECUTE p(:'arr');
EXPLAIN (ANALYZE) EXECUTE f(:'arr');
EXPLAIN (ANALYZE) EXECUTE f(:'arr');
ROLLBACK;
SQL
$RT/pg-stop >/dev/null

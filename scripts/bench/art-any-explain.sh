#!/bin/bash
# Copy next to a bundle folder `pg` with bundle-server.sh and run after
# art-lookups-ab.sh (its data kept), or with SETUP=1 on a fresh server
# that builds the same table (ROWS uuids, default 10^7) and indexes: where
# a 128K uuid `= ANY` spends its time, planning and execution, per index,
# the keys as the benches pass them (one text[] parameter cast to uuid[]:
# a custom plan folds it), and from an InitPlan (nothing parsed or folded).
cd "$(dirname "$0")"
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
FRESH=${SETUP:+1}
FRESH=${FRESH:-0} source ./bundle-server.sh
if [ -n "${SETUP:-}" ]; then
  $P <<SQL >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE bu (k uuid, payload int);
INSERT INTO bu SELECT gen_random_uuid(), g FROM generate_series(1, ${ROWS:-10000000}) g;
VACUUM ANALYZE bu;
SET maintenance_work_mem = '4GB';
CREATE INDEX bu_a ON bu USING gpu_art (k);
CREATE INDEX bu_b ON bu (k);
CREATE INDEX bu_h ON bu USING hash (k);
CREATE TABLE keys128 AS SELECT array_agg(k) AS a FROM (SELECT k FROM bu WHERE random() < 0.014 ORDER BY random() LIMIT 128000) s;
VACUUM ANALYZE bu;
SQL
fi
$P -c "SELECT pg_prewarm('bu'), pg_prewarm('bu_a'), pg_prewarm('bu_b'), pg_prewarm('bu_h')" >/dev/null
for setup in "gpu_art:DROP INDEX bu_b; DROP INDEX bu_h;" "btree:DROP INDEX bu_a; DROP INDEX bu_h;" "hash:DROP INDEX bu_a; DROP INDEX bu_b;"; do
  for forced in "" "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off;"; do
    echo "== ${setup%%:*} ${forced:+forced}"
    $P <<SQL 2>&1 | grep -E "Planning Time|Execution Time|Scan|Gather" | head -8
BEGIN; ${setup#*:} $forced
PREPARE q(text[]) AS SELECT count(*) FROM bu WHERE k = ANY(\$1::uuid[]);
SELECT a::text AS arr FROM keys128 \\gset
SELECT count(*) FROM bu WHERE k = ANY((SELECT a FROM keys128)::uuid[]);
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE q(:'arr');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE q(:'arr');
EXPLAIN (ANALYZE, TIMING OFF) SELECT count(*) FROM bu WHERE k = ANY((SELECT a FROM keys128)::uuid[]);
ROLLBACK;
SQL
  done
done
$RT/pg-stop >/dev/null

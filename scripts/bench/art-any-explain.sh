#!/bin/bash
# Copy next to a bundle folder `pg` with bundle-server.sh (and
# art-uuid-table.sh) and run after
# art-lookups-ab.sh (its data kept), or with SETUP=1 on a fresh server
# that builds the same table (ROWS uuids, default 10^7) and indexes: where
# a 128K uuid `= ANY` spends its time, planning and execution, per index,
# the keys as the benches pass them (one text[] parameter cast to uuid[]:
# a custom plan folds it), and from an InitPlan (nothing parsed or folded).
cd "$(dirname "$0")"
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
FRESH=${SETUP:+1}
FRESH=${FRESH:-0} source ./bundle-server.sh
[ -n "${SETUP:-}" ] && source ./art-uuid-table.sh
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

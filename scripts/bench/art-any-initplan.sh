#!/bin/bash
# The forced `= ANY(128K)` count (index-only, jit off) over gpu_art and
# over btree in turn, the keys passed as an initplan (no planning of a
# 128K-element constant, which the SQL bench's bound parameter costs both
# alike): 10^7 random uuids (art-uuid-table.sh), ROUNDS rounds (default 3)
# of five timed runs each after one untimed. Copy next to a bundle
# folder `pg` with bundle-server.sh and art-uuid-table.sh and run it there.
cd "$(dirname "$0")"
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
source ./bundle-server.sh
source ./art-uuid-table.sh
$P -c "SELECT pg_prewarm('bu'), pg_prewarm('bu_a'), pg_prewarm('bu_b'), pg_prewarm('bu_h')" >/dev/null
A="SELECT count(*) FROM bu WHERE k = ANY((SELECT a FROM keys128)::uuid[])"
for r in $(seq ${ROUNDS:-3}); do
  for idx in gpu_art:bu_a btree:bu_b; do
    keep=${idx#*:}
    drops=$(for i in bu_a bu_b bu_h; do [ $i != $keep ] && echo -n "DROP INDEX $i; "; done)
    echo "round $r ${idx%%:*}: $($P <<SQL 2>&1 | grep -E '^Time|ERROR' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '
SET jit = off; SET enable_seqscan = off; SET enable_bitmapscan = off;
BEGIN; $drops
$A;
\timing on
$A; $A; $A; $A; $A;
\timing off
ROLLBACK;
SQL
)"
  done
done
$RT/pg-stop >/dev/null

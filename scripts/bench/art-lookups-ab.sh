#!/bin/bash
# gpu_art's single lookups with two builds in turn, btree and hash beside:
# 10^7 random uuids, 50K lookups of stored keys in random order in a
# PL/pgSQL loop (`SELECT payload ... WHERE k = x`, index scans), five timed
# runs per build and round after one untimed; then a forced `= ANY(128K)`
# count (index-only, jit off), three timed (keys of rows all over the
# table: until 12fa61e those of 2% of its pages). PARTS=batches measures
# instead the 128K keys' batches over gpu_art alone: `gpu_art_probe`
# joined back by ctid, the function alone, and the join as written
# (GpuIndexJoin); PARTS=any the forced `= ANY(128K)` count (index-only)
# and sum(payload) (index scan); four timed each. The old build is the
# bundle's library (or OLD=path), the new one ./new.so (or the bundle's
# with OLD=). Copy next to a bundle folder `pg` (scripts/gpu-pg-bundle.sh)
# with bundle-server.sh and art-uuid-table.sh and run it there; ROUNDS (default 3), ORDER (the
# builds in a round, default "old new").
cd "$(dirname "$0")"; here=$(pwd)
conf=${conf:-'shared_buffers=24GB;max_wal_size=16GB'}
source ./bundle-server.sh
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
if [ -n "$OLD" ]; then cp $lib /tmp/new.so; cp "$OLD" /tmp/old.so; else cp $lib /tmp/old.so; cp $here/new.so /tmp/new.so; fi
source ./art-uuid-table.sh
$P <<SQL >/dev/null
CREATE TABLE keys AS SELECT k FROM bu TABLESAMPLE SYSTEM (1) ORDER BY random() LIMIT 50000;
CREATE FUNCTION lk() RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE s bigint := 0; x uuid; p int;
BEGIN
  FOR x IN SELECT k FROM keys LOOP
    SELECT payload INTO p FROM bu WHERE k = x;
    s := s + p;
  END LOOP;
  RETURN s;
END \$\$;
SQL
W="SELECT pg_prewarm('bu'), pg_prewarm('bu_a'), pg_prewarm('bu_b'), pg_prewarm('bu_h');"
A="SELECT count(*) FROM bu WHERE k = ANY((SELECT a FROM keys128)::uuid[])"
times() { grep -E '^Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '; }
# One index at a time: the others dropped in a transaction rolled back.
lookups() {
  $P <<SQL 2>&1 | times
SET jit = off;
BEGIN; $1
SELECT lk();
\timing on
SELECT lk(); SELECT lk(); SELECT lk(); SELECT lk(); SELECT lk();
\timing off
ROLLBACK;
SQL
}
# Statements over gpu_art alone (settings first), four timed runs each.
series() {
  local set=$1; shift
  for q in "$@"; do
    echo -n "| $($P <<SQL 2>&1 | times
SET jit = off; $set BEGIN; DROP INDEX bu_b; DROP INDEX bu_h;
$q;
\timing on
$q; $q; $q; $q;
\timing off
ROLLBACK;
SQL
)"
  done
}
batches() {
  series "" "SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys128)) p JOIN bu t ON t.ctid = p.ctid" \
    "SELECT count(*) FROM gpu_art_probe('bu_a', (SELECT a FROM keys128))" \
    "SELECT count(*) FROM unnest((SELECT a FROM keys128)) u(k) JOIN bu t ON t.k = u.k"
}
anys() {
  series "SET enable_seqscan = off; SET enable_bitmapscan = off;" "$A" "${A/count(\*)/sum(payload)}"
}
for r in $(seq ${ROUNDS:-3}); do
  for v in ${ORDER:-old new}; do
    $RT/pg-stop >/dev/null; cp /tmp/$v.so $lib
    PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
    $P -c "$W" >/dev/null
    if [ "$PARTS" = batches ]; then
      echo "round $r $v gpu_art: probe joined back, probe, join as written $(batches)"
      continue
    elif [ "$PARTS" = any ]; then
      echo "round $r $v gpu_art: = ANY(128K) forced, count (index-only), sum(payload) (index scan) $(anys)"
      continue
    fi
    echo "round $r $v gpu_art: lookups $(lookups 'DROP INDEX bu_b; DROP INDEX bu_h;')| = ANY(128K) forced $($P <<SQL 2>&1 | times
SET jit = off; SET enable_seqscan = off; SET enable_bitmapscan = off;
BEGIN; DROP INDEX bu_b; DROP INDEX bu_h;
$A;
\timing on
$A; $A; $A;
ROLLBACK;
SQL
)"
    echo "round $r $v btree: lookups $(lookups 'DROP INDEX bu_a; DROP INDEX bu_h;')"
    echo "round $r $v hash: lookups $(lookups 'DROP INDEX bu_a; DROP INDEX bu_b;')"
  done
done
$RT/pg-stop >/dev/null

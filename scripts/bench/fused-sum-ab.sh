#!/bin/bash
# Libraries in turn (LIBS, default "old new": ./old.so, ./new.so; an
# entry lib@a=1;b=2 runs lib with those server settings added), ROUNDS
# (4) rounds, on the parallel fused sum `sum(payload)` of
# `gpu_btree_probe(index, keys) p JOIN t ON t.ctid = p.ctid` over
# fused-keysets-ab.sh's tables (tu: uniform keys, tz: Zipf keys; 10^7
# rows, 131,072 keys): tz and tu at default settings (two workers), tz
# with four and in one backend. Each query once unmeasured, then five
# times (ms), in a fresh session after the server restarted on the
# library. PLANS=1 adds EXPLAIN ANALYZE's planning and execution times of
# tz (three runs), in parallel and in one backend; CONF adds server
# settings (`a=1;b=2`). Last, PostgreSQL's parallel hash join of each sum
# (btree kept, gpu_btree dropped in a rolled-back transaction), once for
# each setting, or tz's in every round with HASH_EACH_ROUND=1. Copy next
# to a bundle folder `pg` (scripts/gpu-pg-bundle.sh) with bundle-server.sh
# and the libraries, and run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf="shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min;huge_pages=on${CONF:+;$CONF}"
source ./bundle-server.sh
# restart LIB[@SETTINGS]: the server on ./LIB.so, with SETTINGS added.
restart() {
  local extra=; [[ $1 == *@* ]] && extra=";${1#*@}"
  $RT/pg-stop >/dev/null; cp "$here/${1%%@*}.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
  PRELOAD=gpuindex PGCONF_EXTRA="$conf$extra" $RT/pg-start >/dev/null || exit 1
}
libs=${LIBS:-old new}
restart ${libs%% *}
keyset_tables
# fused_sum TABLE, hash_sum TABLE: the sum over TABLE through the fused
# call, and as PostgreSQL's join of unnest; repeat N SQL: SQL N times.
fused_sum() { echo "SELECT sum(t.payload) FROM gpu_btree_probe('${1}_g', :'arr'::int8[]) p JOIN $1 t ON t.ctid = p.ctid;"; }
hash_sum() { echo "SELECT sum(t.payload) FROM unnest(:'arr'::int8[]) u(k) JOIN $1 t ON t.k = u.k;"; }
repeat() { for _ in $(seq $1); do echo "$2"; done; }
# q TABLE SETTINGS: the five times of the fused sum over TABLE.
q() {
  $P <<SQL 2>&1 | grep -E '^Time' | sed 's/Time: //; s/ ms//' | tr '\n' ' '
SELECT a AS arr FROM probes WHERE t = '$1' \gset
SET jit = off; $2
\o /dev/null
$(fused_sum $1)
\timing on
$(repeat 5 "$(fused_sum $1)")
SQL
  echo
}
# e TABLE SETTINGS: planning and execution times (ms) of three EXPLAIN
# ANALYZE runs of the fused sum over TABLE, as plan/exec.
e() {
  $P <<SQL 2>&1 | grep -E 'Planning Time|Execution Time' | sed 's/.*Time: //; s/ ms//' | paste -d/ - - | tr '\n' ' '
SELECT a AS arr FROM probes WHERE t = '$1' \gset
SET jit = off; $2
$(repeat 3 "EXPLAIN (ANALYZE, COSTS OFF) $(fused_sum $1)")
SQL
  echo
}
# hashjoin TABLE: three times of PostgreSQL's parallel hash join of the sum
# (btree kept, gpu_btree dropped in a rolled-back transaction).
hashjoin() {
  $P <<SQL 2>&1 | grep -E '^Time' | sed 's/Time: //; s/ ms.*//' | tr '\n' ' '
SELECT a AS arr FROM probes WHERE t = '$1' \gset
SET jit = off; SET gpuindex.enable_join = off; SET enable_nestloop = off; SET enable_mergejoin = off;
BEGIN; DROP INDEX ${1}_g;
\o /dev/null
$(hash_sum $1)
\timing on
$(repeat 3 "$(hash_sum $1)")
\timing off
ROLLBACK;
SQL
}
for round in $(seq ${ROUNDS:-4}); do
for v in $libs; do
  restart $v
  echo "-- $round $v tz parallel: $(q tz '')"
  echo "-- $round $v tu parallel: $(q tu '')"
  echo "-- $round $v tz 4 workers: $(q tz 'SET max_parallel_workers_per_gather = 4;')"
  echo "-- $round $v tz serial: $(q tz 'SET max_parallel_workers_per_gather = 0;')"
  [ -n "${HASH_EACH_ROUND:-}" ] && echo "-- $round $v hash tz: $(hashjoin tz)"
  if [ -n "${PLANS:-}" ]; then
    echo "-- $round $v tz parallel plan/exec: $(e tz '')"
    echo "-- $round $v tz serial plan/exec: $(e tz 'SET max_parallel_workers_per_gather = 0;')"
  fi
done
done
# Once for each set of settings the entries ran with (every round's
# entries already timed it with HASH_EACH_ROUND).
if [ -z "${HASH_EACH_ROUND:-}" ]; then
  first=${libs%% *}
  for extra in $(for v in $libs; do [[ $v == *@* ]] && echo "@${v#*@}" || echo @; done | sort -u); do
    [ "$extra" = @ ] && extra=
    restart "${first%%@*}$extra"
    echo "-- hash tz$extra: $(hashjoin tz)"
    echo "-- hash tu$extra: $(hashjoin tu)"
  done
fi
$RT/pg-stop >/dev/null

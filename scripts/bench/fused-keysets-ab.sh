#!/bin/bash
# Two libraries in turn (./old.so, ./new.so; LIBS="old mid new" for more:
# ./mid.so) on the batch function joined
# back by ctid, its keys a constant, on fused-keysets.sh's two key sets in
# one database: "uniform" (tu: a permutation of 0..N-1, M random probe keys,
# ~9% misses) and "zipf" (tz: Zipf-like ranks, s = 1.2 over 10^6 ranks, the
# first held by ~13% of the rows; M distinct stored keys). gpu_btree and
# btree on k, VACUUM ANALYZE. ROUNDS (3) rounds of: each library (the
# server restarted on it) timing `count(*)` (index-only) and
# `sum(payload)` of `gpu_btree_probe(index, keys) p JOIN t ON t.ctid =
# p.ctid` at default settings; then btree's plan of the join as written
# (`unnest(keys) u(k) JOIN t ON t.k = u.k`, gpu_btree dropped in a
# rolled-back transaction). Each query once unmeasured, then three times
# (ms). With WHAT=counts, count(*) only, counted by GpuIndexJoin four
# ways: the fused calls of gpu_btree_probe and gpu_learned_probe (a
# gpu_learned index built too), and the join as written over each index
# (`unnest(keys) u(k) JOIN t ON t.k = u.k`, the other one and btree's
# dropped in a rolled-back transaction; JOIN_SETTINGS: SQL run before
# those, e.g. to keep the planner from other joins). A LIBS item may add
# server settings to its library (`new:;huge_pages=on`: the text after
# the colon is appended to the settings); with BTREE_EACH=1 btree's plan
# is timed after each item, on that item's settings, not once a round;
# BTREE_VARIANTS="default nestloop hash merge" times PostgreSQL's other
# joins too (btree_plan); AS_WRITTEN=1 times each library's plan of the
# join as written (`unnest(keys) u(k) JOIN t ON t.k = u.k`, btree
# dropped in a rolled-back transaction) beside the fused call.
# WHATS: the fused call's aggregates (default "count(*) sum(t.payload)";
# e.g. max(t.payload), which PostgreSQL's Aggregate computes from rows).
# Last, warm EXPLAIN (ANALYZE, VERBOSE) of the Zipf sum for each item
# (each participant's first row), and AFTER (a script sourced there,
# with the tables, use_lib and $P). Copy next to a bundle folder `pg`
# (scripts/gpu-pg-bundle.sh) with bundle-server.sh, old.so and new.so, and
# run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf=${CONF:-'shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'}
source ./bundle-server.sh
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
N=${N:-10000000}
M=${M:-131072}
use_lib() {
  local extra=; [[ $1 == *:* ]] && extra=${1#*:}
  $RT/pg-stop >/dev/null; cp "$here/${1%%:*}.so" $RT/usr/lib/postgresql/15/lib/gpuindex.so
  PRELOAD=gpuindex PGCONF_EXTRA="$conf$extra" $RT/pg-start >/dev/null || exit 1
}
use_lib $(echo ${LIBS:-old new} | cut -d' ' -f1)
t0=$(date +%s)
keyset_tables "$([ "${WHAT:-}" = counts ] && echo "CREATE INDEX tu_l ON tu USING gpu_learned (k); CREATE INDEX tz_l ON tz USING gpu_learned (k);")"
echo "built in $(( $(date +%s) - t0 )) s"
for t in tu tz; do
  echo "== $t: $($P -Atc "SELECT count(*) FROM $t WHERE k = ANY((SELECT a FROM probes WHERE t = '$t')::int8[])") matching rows"
done
# (\gset ends its line.)
keys() { echo "SELECT a AS arr FROM probes WHERE t = '$1' \\gset"; }
# btree_plan LABEL: btree's plan of the join as written, on the server
# as it runs; with BTREE_VARIANTS (default: "default") also PostgreSQL's
# other joins, each alone (nestloop, hash, merge: the other two off), so
# that the best built-in plan is known, not only the one chosen.
btree_plan() {
  local whats=("count(*)" "sum(t.payload)"); [ "${WHAT:-}" = counts ] && whats=("count(*)")
  gpuindexes() { echo "${1}_g$([ "${WHAT:-}" = counts ] && echo ", ${1}_l")"; }
  only() { for j in nestloop hashjoin mergejoin; do [ $j = $1 ] || echo -n "SET enable_$j = off; "; done; }
  for t in tu tz; do
    for what in "${whats[@]}"; do
      for v in ${BTREE_VARIANTS:-default}; do
        local set=; case $v in nestloop) set=$(only nestloop) ;; hash) set=$(only hashjoin) ;; merge) set=$(only mergejoin) ;; esac
        echo "-- round $1 btree$([ $v = default ] || echo " $v") $t $what: $(timed "$(keys $t)"$'\n'"SET gpuindex.enable_join = off; $set BEGIN; DROP INDEX $(gpuindexes $t);" \
          "SELECT $what FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k" "ROLLBACK;")"
      done
    done
  done
}
for round in $(seq ${ROUNDS:-3}); do
  for lib in ${LIBS:-old new}; do
    use_lib $lib
    for t in tu tz; do
      if [ "${WHAT:-}" = counts ]; then
        for am in btree:g learned:l; do
          echo "-- round $round $lib $t gpu_${am%:*}_probe count(*): $(timed "$(keys $t)"$'\n' "SELECT count(*) FROM gpu_${am%:*}_probe('${t}_${am#*:}', :'arr'::int8[]) p JOIN $t t ON t.ctid = p.ctid")"
        done
        for am in btree:l learned:g; do
          echo "-- round $round $lib $t join over gpu_${am%:*} count(*): $(timed "$(keys $t)"$'\n'"${JOIN_SETTINGS:-} BEGIN; DROP INDEX ${t}_${am#*:}, ${t}_b;" \
            "SELECT count(*) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k" "ROLLBACK;")"
        done
        continue
      fi
      for what in ${WHATS:-"count(*)" "sum(t.payload)"}; do
        echo "-- round $round $lib $t $what: $(timed "$(keys $t)"$'\n' "SELECT $what FROM gpu_btree_probe('${t}_g', :'arr'::int8[]) p JOIN $t t ON t.ctid = p.ctid")"
        [ -n "${AS_WRITTEN:-}" ] && echo "-- round $round $lib $t join as written $what: $(timed "$(keys $t)"$'\n'"BEGIN; DROP INDEX ${t}_b;" \
          "SELECT $what FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k" "ROLLBACK;")"
      done
    done
    [ -n "${BTREE_EACH:-}" ] && btree_plan "$round $lib"
  done
  [ -n "${BTREE_EACH:-}" ] || btree_plan "$round"
done
echo "-- plans (new library)"
for t in tu tz; do
  $P <<SQL | grep -E "Join|Scan|Index:|Aggregate|rows=|Time|Matches|Fetches"
$(keys $t)
EXPLAIN (ANALYZE, COSTS OFF) SELECT count(*) FROM gpu_btree_probe('${t}_g', :'arr'::int8[]) p JOIN $t t ON t.ctid = p.ctid;
$([ "${WHAT:-}" = counts ] && echo "${JOIN_SETTINGS:-} BEGIN; DROP INDEX ${t}_l, ${t}_b; EXPLAIN (ANALYZE, COSTS OFF) SELECT count(*) FROM unnest(:'arr'::int8[]) u(k) JOIN $t t ON t.k = u.k; ROLLBACK;")
SQL
done
for lib in ${LIBS:-old new}; do
  use_lib $lib
  echo "-- $lib: Zipf sum, EXPLAIN (ANALYZE, VERBOSE)"
  zipf_sum_plan
done
[ -n "${AFTER:-}" ] && source "$AFTER"
$RT/pg-stop >/dev/null

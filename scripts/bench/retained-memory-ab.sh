#!/bin/bash
# gpuindex.retained_memory at its default (256MB) against 0: two sessions, runs
# interleaved, the equi-join (10^6 x 10^7 int8) under auto and cpu and a 128K
# `= ANY` count over gpu_btree; the nested loop and btree's `= ANY` beside
# (docs/notes.md, "Batch buffers kept between batches"). Copy next to a bundle
# folder `pg` made by scripts/gpu-pg-bundle.sh, with equi-tables.sh and bundle-server.sh, and run it there.
cd "$(dirname "$0")"
source ./equi-tables.sh
nl
echo "=== = ANY(128K) count, btree (forced index scan)"
$P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
BEGIN; DROP INDEX bj_inner_g; $B SET enable_seqscan = off; SET enable_bitmapscan = off;
\timing on
$A; $A; $A; $A;
ROLLBACK;
SQL
coproc K { $P -A -t 2>&1; }
coproc N { $P -A -t 2>&1; }
init="$B SET enable_nestloop = off; SET enable_seqscan = off; SET enable_bitmapscan = off;"
echo "$init SET gpuindex.retained_memory = '256MB';" >&${K[1]}
echo "$init SET gpuindex.retained_memory = 0;" >&${N[1]}
run() { # fd_in fd_out device sql
  local t0 t1 r; echo "SET gpuindex.device = $3; $4;" >&$1; t0=$(date +%s%N); read -u $2 r; t1=$(date +%s%N)
  echo -n "$(( (t1-t0)/1000000 )) "
}
for q in J A; do
  sql=${!q}
  echo "=== $q: warm-up"; run ${K[1]} ${K[0]} auto "$sql"; run ${N[1]} ${N[0]} auto "$sql"; echo
  for d in auto cpu; do
    kk=""; nn=""
    for r in 1 2 3 4 5; do
      kk="$kk $(run ${K[1]} ${K[0]} $d "$sql")"; nn="$nn $(run ${N[1]} ${N[0]} $d "$sql")"
    done
    echo "$q $d kept (ms):$kk"; echo "$q $d none (ms):$nn"
  done
done
echo '\q' >&${K[1]}; echo '\q' >&${N[1]}; wait
$RT/pg-stop >/dev/null

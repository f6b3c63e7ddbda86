#!/bin/bash
# gpu_learned against btree at N rows (default 10^8, permutation keys as
# gpuindex-sql-bench) on one table: a 128K-key `= ANY` count (index-only),
# 20K single lookups in a PL/pgSQL loop, the probe function joined back by
# ctid and the join as written; each contender in a transaction that drops
# the other index; rounds in ORDER (docs/bench/sql-gpu_learned-1e8-h200-a164f4d.md).
# Copy next to a bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with
# bundle-server.sh, and run it there. ORDER names each round's library:
# `bundle` (the bundle's own), `old` (the bundle's own, saved at the start,
# or OLD=path) or `new` (./new.so, or the bundle's own where OLD is set and
# there is no new.so).
# CONF replaces the server settings (shared_buffers 32GB).
cd "$(dirname "$0")"; here=$(pwd)
conf=${CONF:-'shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'}
source ./bundle-server.sh
lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
cp $lib /tmp/bundle.so
cp ${OLD:-/tmp/bundle.so} /tmp/old.so
if [ -f $here/new.so ]; then cp $here/new.so /tmp/new.so; else cp /tmp/bundle.so /tmp/new.so; fi
N=${N:-100000000}
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
t0=$(date +%s)
$P <<SQL
CREATE EXTENSION gpuindex;
CREATE TABLE t (k int8, payload int8);
INSERT INTO t SELECT (i * 2654435761) % $N, i FROM generate_series(0, $N - 1) i;
CREATE INDEX t_b ON t (k);
CREATE INDEX t_l ON t USING gpu_learned (k);
VACUUM ANALYZE t;
SELECT setseed(0.25);
CREATE TABLE probes AS SELECT array_agg((random() * $N * 1.09)::int8) a FROM generate_series(1, 131072);
CREATE TABLE looks AS SELECT array_agg((random() * $N * 1.09)::int8) a FROM generate_series(1, 20000);
SQL
echo "built in $(( $(date +%s) - t0 )) s"
Q="SELECT count(*) FROM t WHERE k = ANY((SELECT a FROM probes)::int8[])"
L="DO \$\$ DECLARE x int8; c int8; BEGIN FOREACH x IN ARRAY (SELECT a FROM looks) LOOP SELECT count(*) INTO c FROM t WHERE k = x; END LOOP; END \$\$"
F="SELECT count(*) FROM gpu_learned_probe('t_l', (SELECT a FROM probes)) p JOIN t ON t.ctid = p.ctid"
J="SELECT count(*) FROM unnest((SELECT a FROM probes)) u(k) JOIN t ON t.k = u.k"
for v in ${ORDER:-old new old new}; do
  $RT/pg-stop >/dev/null
  if [ $v = old ]; then cp /tmp/old.so $lib; elif [ $v = new ]; then cp /tmp/new.so $lib; elif [ $v = bundle ]; then cp /tmp/bundle.so $lib; fi
  PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
  for ix in b l; do
    other=$([ $ix = b ] && echo l || echo b)
    echo "=== $v $ix"
    $P <<SQL 2>&1 | grep -E 'Time|^ *[0-9]+$|ERROR' | tr '\n' ' '; echo
SET max_parallel_workers_per_gather=0; SET enable_seqscan=off; SET enable_bitmapscan=off; SET jit=off;
BEGIN; DROP INDEX t_$other;
\o /dev/null
$Q; $Q; $L; $L; $J;
\o
\timing on
$Q; $Q; $Q;
$L; $L;
$J; $J;
\timing off
ROLLBACK;
SQL
  done
  echo "=== $v probe fn"; $P -c "$F" >/dev/null; $P <<SQL 2>&1 | grep -E 'Time' | tr '\n' ' '; echo
\timing on
$F; $F; $F;
SQL
done
$RT/pg-stop >/dev/null

#!/bin/bash
# A batch function joined back by ctid, `FROM probe('index', keys) p JOIN t
# ON t.ctid = p.ctid`, three ways in turn on one library: the call run by
# GpuIndexJoin itself ("fused": the index a constant), the same query with
# the index named through a cast (`'index'::text::regclass`: not a
# constant, so the function runs, checks each row's visibility and the
# join reads its TIDs: what every build before the fused call did), and
# the join as written through each built-in index alone (a forced nested
# loop; the other indexes dropped in a rolled-back transaction).
#   SET=learned (default): N (10^8) int8 permutation keys, gpu_learned and btree;
#   SET=art: N (10^7) uuids (md5 of i), gpu_art, btree and hash;
#   SET=spatial: N (10^7) uniform points in [0,1000)^2, gpu_spatial_range
#   over M (131,072) 1x1 boxes, against GiST's nested loop;
#   SET=zipf: N (10^7) int8 keys of Zipf-like ranks (s = 1.2 over 10^6
#   ranks: rank r held by ~r^-1.2 of the rows, the first by ~13%),
#   gpu_btree and btree, the probes M distinct stored keys.
# M (131,072) probe keys (about 9% misses). Copy next to a bundle folder `pg`
# made by scripts/gpu-pg-bundle.sh, with bundle-server.sh, and run it there.
cd "$(dirname "$0")"
conf=${CONF:-'shared_buffers=32GB;max_wal_size=32GB;checkpoint_timeout=30min'}
source ./bundle-server.sh
SET=${SET:-learned}
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
t0=$(date +%s)
if [ "$SET" = spatial ]; then
  N=${N:-10000000}
  key() { echo "point(random() * 1000, random() * 1000)"; }
  probe="box(point(x, y), point(x + 1, y + 1))"
  fn=gpu_spatial_range; ours=t_s; builtin="t_g"
  indexes="CREATE INDEX t_s ON t USING gpu_spatial (k); CREATE INDEX t_g ON t USING gist (k);"
  ty=point
elif [ "$SET" = zipf ]; then
  N=${N:-10000000}
  # P(rank >= r) = r^-0.2 (least(): random() may be 0).
  key() { echo "(least(floor(pow(random(), -5)), 1000000)::int8 * 2654435761) % 4294967296"; }
  probe=k
  fn=gpu_btree_probe; ours=t_z; builtin="t_b"
  indexes="CREATE INDEX t_z ON t USING gpu_btree (k); CREATE INDEX t_b ON t (k);"
  ty=int8
elif [ "$SET" = art ]; then
  N=${N:-10000000}
  key() { echo "md5(($1)::text)::uuid"; }
  probe=$(key "(random() * $N * 1.09)::int8")
  fn=gpu_art_probe; ours=t_a; builtin="t_b t_h"
  indexes="CREATE INDEX t_a ON t USING gpu_art (k); CREATE INDEX t_b ON t (k); CREATE INDEX t_h ON t USING hash (k);"
  ty=uuid
else
  N=${N:-100000000}
  key() { echo "(($1) * 2654435761) % $N"; }
  probe="(random() * $N * 1.09)::int8"
  fn=gpu_learned_probe; ours=t_l; builtin="t_b"
  indexes="CREATE INDEX t_l ON t USING gpu_learned (k); CREATE INDEX t_b ON t (k);"
  ty=int8
fi
M=${M:-131072}
rows="generate_series(1, $M)"
[ "$SET" = spatial ] && rows="(SELECT random() * 999 x, random() * 999 y FROM generate_series(1, $M)) g"
[ "$SET" = zipf ] && rows="(SELECT k FROM (SELECT DISTINCT k FROM t) d ORDER BY random() LIMIT $M) g"
$P <<SQL
CREATE EXTENSION gpuindex;
CREATE TABLE t (k $ty, payload int8);
INSERT INTO t SELECT $(key i), i FROM generate_series(0, $N - 1) i;
$indexes
VACUUM ANALYZE t;
SELECT setseed(0.25);
CREATE TABLE probes AS SELECT array_agg($probe) a FROM $rows;
SQL
echo "built in $(( $(date +%s) - t0 )) s"
F="SELECT count(*) FROM $fn('$ours', (SELECT a FROM probes)) p JOIN t ON t.ctid = p.ctid"
U="SELECT count(*) FROM $fn('$ours'::text::regclass, (SELECT a FROM probes)) p JOIN t ON t.ctid = p.ctid"
J="SELECT count(*) FROM unnest((SELECT a FROM probes)) u(k) JOIN t ON t.k = u.k"
[ "$SET" = spatial ] && J="SELECT count(*) FROM unnest((SELECT a FROM probes)) u(b) JOIN t ON t.k <@ u.b"
$P -c "EXPLAIN (ANALYZE, COSTS OFF) $F"
for round in 1 2 3; do
  for q in F U; do
    echo "=== round $round $q"
    timed "" "${!q}"
  done
  for ix in $builtin; do
    echo "=== round $round join through $ix"
    drop=$(for o in $ours $builtin; do [ $o != $ix ] && echo -n "DROP INDEX $o; "; done)
    timed "SET max_parallel_workers_per_gather = 0; SET enable_seqscan = off; SET enable_bitmapscan = off; BEGIN; $drop" "$J" "ROLLBACK;"
  done
done
$RT/pg-stop >/dev/null

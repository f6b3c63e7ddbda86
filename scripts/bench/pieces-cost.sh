#!/bin/bash
# What searching a batch in pieces (gpuindex.batch_work_mem) costs:
# gpu_spatial_range over M (100,000) 1x1 boxes on N (10^7) uniform points
# in [0,1000)^2 (about 1M matching rows), as a function (count of its
# rows) and as a fused call joined back by ctid, at settings that hold
# the whole batch and that split it into about 12 and 46 pieces. Copy
# next to a bundle folder `pg` made by scripts/gpu-pg-bundle.sh, with
# bundle-server.sh, and run it there.
cd "$(dirname "$0")"
conf=${CONF:-'shared_buffers=16GB;max_wal_size=32GB'}
source ./bundle-server.sh
N=${N:-10000000}; M=${M:-100000}
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null; nproc
$P <<SQL
CREATE EXTENSION gpuindex;
CREATE TABLE t (k point);
INSERT INTO t SELECT point(random() * 1000, random() * 1000) FROM generate_series(1, $N);
CREATE INDEX t_s ON t USING gpu_spatial (k);
VACUUM ANALYZE t;
CREATE TABLE probes AS SELECT array_agg(box(point(x, y), point(x + 1, y + 1))) a
  FROM (SELECT random() * 999 x, random() * 999 y FROM generate_series(1, $M)) g;
SQL
FN="SELECT count(*) FROM gpu_spatial_range('t_s', (SELECT a FROM probes))"
F="SELECT count(*) FROM gpu_spatial_range('t_s', (SELECT a FROM probes)) p JOIN t ON t.ctid = p.ctid"
for mem in 1GB 4MB 1MB; do
  $P -c "SET gpuindex.batch_work_mem = '$mem'" -c "EXPLAIN (ANALYZE, COSTS OFF) $F" | grep -E "Pieces|Matches|Execution"
done
for round in 1 2 3; do
  for mem in 1GB 4MB 1MB; do
    for q in FN F; do
      echo "=== round $round $mem $q"
      timed "SET gpuindex.batch_work_mem = '$mem';" "${!q}"
    done
  done
done
$RT/pg-stop >/dev/null

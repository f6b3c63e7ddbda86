#!/bin/bash
# Peak backend memory of batches past gpuindex.batch_work_mem (64MB: 1.4M
# matches), on a running server (psql's PG* settings; PSQL overrides the
# client): the probe function of a key held by HOT (10^7) rows, through
# gpu_btree, gpu_learned and gpu_art (an ERROR: one query past the
# limit), and gpu_metric_within of Q (200) queries each reaching all of
# V (200,000) 2-d vectors (answered in pieces). Each query runs in a
# fresh session; the peak is its backend's VmHWM (shared buffers it
# touched included), read by pg_read_file (a superuser's session).
set -u
PSQL=${PSQL:-psql -X -q -v ON_ERROR_STOP=0}
HOT=${HOT:-10000000}; V=${V:-200000}; Q=${Q:-200}
$PSQL <<SQL >/dev/null
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS gpuindex;
DROP TABLE IF EXISTS bm_k, bm_v;
CREATE TABLE bm_k (k int8, s text);
INSERT INTO bm_k SELECT CASE WHEN g <= $HOT THEN 1 ELSE g END, CASE WHEN g <= $HOT THEN 'hot' ELSE 'k' || g END
  FROM generate_series(1, $HOT + 100000) g;
CREATE INDEX bm_k_b ON bm_k USING gpu_btree (k);
CREATE INDEX bm_k_l ON bm_k USING gpu_learned (k);
CREATE INDEX bm_k_a ON bm_k USING gpu_art (s COLLATE "C");
CREATE TABLE bm_v AS SELECT g AS id, ARRAY[random(), random()]::real[] AS v FROM generate_series(1, $V) g;
CREATE INDEX bm_v_i ON bm_v USING gpu_metric (v);
VACUUM ANALYZE bm_k, bm_v;
SQL
echo "| batch (batch_work_mem = 64MB) | answer | ms | peak backend RSS |"
echo "|---|---|---:|---:|"
for q in "gpu_btree_probe('bm_k_b', ARRAY[1]::int8[])" "gpu_learned_probe('bm_k_l', ARRAY[1]::int8[])" \
         "gpu_art_probe('bm_k_a', ARRAY['hot'])" "gpu_metric_within('bm_v_i', array_fill(0.5::real, ARRAY[$Q, 2]), 10)"; do
  out=$($PSQL 2>&1 <<SQL
SET gpuindex.batch_work_mem = '64MB';
\timing on
SELECT count(*) AS rows FROM $q;
\timing off
SELECT 'peak ' || substring(pg_read_file('/proc/' || pg_backend_pid() || '/status') from 'VmHWM:\s*(\d+ kB)');
SQL
)
  answer=$(echo "$out" | grep -oE "ERROR: .*matches,|^ *[0-9]+$" | head -1 | sed -E 's/^ *//; s/ERROR: +gpuindex: one query would return (at least [0-9]+ matches),/ERROR (\1)/')
  ms=$(echo "$out" | grep -oE "Time: [0-9.]+" | cut -d' ' -f2)
  peak=$(echo "$out" | grep -oE "peak [0-9]+ kB" | cut -d' ' -f2-)
  echo "| \`$q\` | $answer | $ms | $peak |"
done

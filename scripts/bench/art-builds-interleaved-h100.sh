#!/usr/bin/env bash
# Two builds of gpuindex, interleaved, on 10^7 URL-like keys (text COLLATE
# "C"): a 128K-key `= ANY` count with the index forced (12 runs) and 50K
# single lookups in a PL/pgSQL loop (7 runs), over gpu_art with each build in
# turn, then btree, ROUNDS times (docs/bench/sql-art-1e7-h100-cd700c7.md).
# Copy into the bundle that scripts/gpu-pg-bundle.sh makes (OUTDIR) with the
# other build's library as OUTDIR/old.so and run it there; NEW=FILE replaces
# the bundle's own library. Prints min and median milliseconds (first run of
# each series left out: the backend's mirror and CUDA context).
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=24GB;max_wal_size=16GB'
PRELOAD=gpuindex FRESH=1 PGCONF_EXTRA=$conf server/pg-start >/dev/null || exit 1
source server/pg-env.sh
RT=$(pgb_server_root); lib=$RT/usr/lib/postgresql/15/lib/gpuindex.so
cp "${NEW:-$lib}" /tmp/new.so
psql -X -q <<'SQL' >/dev/null
CREATE EXTENSION IF NOT EXISTS gpuindex; CREATE EXTENSION IF NOT EXISTS pg_prewarm;
CREATE TABLE big_u (k text COLLATE "C", payload int8);
INSERT INTO big_u SELECT 'https://www.site' || h || '.' || (ARRAY['com','org','net','de','io'])[h%5+1] || '/' ||
  (SELECT string_agg((ARRAY['products','blog','news','users','static/img','docs/api/v2','search','category'])[least(8,floor(exp(random()*ln(9)))::int)] || '/', '')
   FROM generate_series(0, floor(random()*6)::int + (g*0)::int)) ||
  'item-' || floor(random()*1e6)::int || '?ref=' || floor(random()*100)::int, g
FROM (SELECT g, floor(exp(random()*ln(50000)))::int h FROM generate_series(1,10000000) g) s;
VACUUM ANALYZE big_u;
SET maintenance_work_mem='4GB';
CREATE INDEX big_u_art ON big_u USING gpu_art (k);
CREATE INDEX big_u_bt ON big_u (k);
-- about one probe in eleven a miss (a stored key and '#')
CREATE TABLE probe AS SELECT CASE WHEN r < 0.0909 THEN k || '#' ELSE k END AS k
  FROM (SELECT k, random() r FROM big_u TABLESAMPLE SYSTEM (2) ORDER BY random() LIMIT 128000) s;
CREATE TABLE probe_arr AS SELECT array_agg(k) AS arr FROM probe;
SQL
{ echo 'SET jit=off; SET enable_seqscan=off; SET enable_bitmapscan=off;'; echo '\timing on'
  for i in $(seq 12); do echo 'SELECT count(*) FROM big_u WHERE k = ANY((SELECT arr FROM probe_arr)::text[]);'; done; } > /tmp/any.sql
{ echo 'SET jit=off;'; echo '\timing on'
  for i in $(seq 7); do echo 'DO $$DECLARE r record; n int8 := 0; p int8; BEGIN FOR r IN SELECT k FROM probe OFFSET 20000 LIMIT 50000 LOOP SELECT payload INTO p FROM big_u WHERE k = r.k; n := n + coalesce(p,0); END LOOP; END$$;'; done; } > /tmp/single.sql
stats() { grep -o 'Time: [0-9.]*' | cut -d' ' -f2 | tail -n +2 | sort -n | awk '{a[NR]=$1} END {printf "min %s median %s", a[1], a[int((NR+1)/2)]}'; }
valid() { psql -X -q -c "UPDATE pg_index SET indisvalid = (indexrelid = '$1'::regclass) WHERE indrelid = 'big_u'::regclass"; }
for r in $(seq ${ROUNDS:-3}); do
  for v in old new; do
    $RT/pg-stop >/dev/null
    if [ $v = old ]; then cp $here/old.so $lib; else cp /tmp/new.so $lib; fi
    PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
    psql -X -q -c "SELECT pg_prewarm('big_u'), pg_prewarm('big_u_art'), pg_prewarm('big_u_bt')" >/dev/null
    valid big_u_art
    echo "round $r $v gpu_art: = ANY(128K) $(psql -X -f /tmp/any.sql 2>&1 | stats) | 50K lookups $(psql -X -f /tmp/single.sql 2>&1 | stats)"
  done
  valid big_u_bt
  echo "round $r btree: = ANY(128K) $(psql -X -f /tmp/any.sql 2>&1 | stats) | 50K lookups $(psql -X -f /tmp/single.sql 2>&1 | stats)"
done
$RT/pg-stop >/dev/null

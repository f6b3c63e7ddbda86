#!/bin/bash
# One backend, 10^7 uuids, 128K keys as ARRAY(SELECT ...) (an initplan: no
# planning of the elements): time and the backend's page faults of
# gpu_art_probe joined back by ctid, = ANY counts (indexes forced) and
# btree's nested loop; then the same with glibc told to keep freed memory
# (GLIBC_TUNABLES). Copy next to a bundle folder `pg`
# (scripts/gpu-pg-bundle.sh) with bundle-server.sh and run it there.
cd "$(dirname "$0")"; here=$(pwd)
conf='shared_buffers=8GB;max_wal_size=16GB'
source ./bundle-server.sh
s=$(date +%s)
$P <<'SQL'
CREATE EXTENSION gpuindex; CREATE EXTENSION pg_prewarm;
CREATE TABLE bu AS SELECT gen_random_uuid() AS k, g AS payload FROM generate_series(1, 10000000) g;
CREATE TABLE ku AS SELECT k FROM bu TABLESAMPLE SYSTEM (2) LIMIT 128000;
CREATE INDEX bu_a ON bu USING gpu_art (k);
CREATE INDEX bu_b ON bu (k);
VACUUM ANALYZE bu; VACUUM ANALYZE ku;
SQL
echo "built in $(( $(date +%s) - s )) s"
run() {
$P <<'SQL' 2>&1 | grep -vE '^$|^-|row'
SELECT pg_prewarm('bu'), pg_prewarm('bu_a'), pg_prewarm('bu_b') \gset
SELECT pg_backend_pid() AS pid \gset
\setenv PID :pid
SET max_parallel_workers_per_gather = 0; SET jit = off;
\set F 'SELECT count(*), sum(t.payload) FROM gpu_art_probe(''bu_a'', ARRAY(SELECT k FROM ku)) p JOIN bu t ON t.ctid = p.ctid'
\set A 'SELECT count(*) FROM bu WHERE k = ANY(ARRAY(SELECT k FROM ku))'
\set N 'SELECT count(*), sum(t.payload) FROM ku JOIN bu t ON t.k = ku.k'
:F \gset
:F \gset
\timing on
\! echo -n "probe fn faults before: "; awk '{print $10}' /proc/$PID/stat
:F \gset
:F \gset
:F \gset
\! echo -n "after 3: "; awk '{print $10}' /proc/$PID/stat
SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off;
:A \gset
\! echo -n "= ANY faults before: "; awk '{print $10}' /proc/$PID/stat
:A \gset
:A \gset
:A \gset
\! echo -n "after 3: "; awk '{print $10}' /proc/$PID/stat
DROP INDEX bu_a;
SET gpuindex.enable_join = off;
:N \gset
\! echo -n "btree NL faults before: "; awk '{print $10}' /proc/$PID/stat
:N \gset
:N \gset
:N \gset
\! echo -n "after 3: "; awk '{print $10}' /proc/$PID/stat
:A \gset
:A \gset
:A \gset
\! echo -n "btree = ANY after 3 more: "; awk '{print $10}' /proc/$PID/stat
SQL
}
echo "== glibc defaults"
run
# (DROP INDEX ran outside a transaction: rebuild it.)
$P -c "CREATE INDEX bu_a ON bu USING gpu_art (k)" >/dev/null
$RT/pg-stop >/dev/null
echo "== GLIBC_TUNABLES: mmap threshold 32 MB, trim threshold 1 GB"
export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824
PRELOAD=gpuindex PGCONF_EXTRA=$conf $RT/pg-start >/dev/null || exit 1
run
$RT/pg-stop >/dev/null

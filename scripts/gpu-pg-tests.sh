#!/usr/bin/env bash
# On a GPU host, inside a bundle made by scripts/gpu-pg-bundle.sh: starts
# the bundled PostgreSQL with gpuindex preloaded, runs pg_regress and the
# integration tests with the GPU required, and stops the server.
# TESTS="join security" runs only those integration test files;
# LIB=path/to/gpuindex.so tests that library instead of the bundle's
# (SQL=path/to/gpuindex--0.1.0.sql with it: its script, where it changed).
set -u
cd "$(dirname "$0")"
here=$(pwd)
export GPUINDEX_REQUIRE_GPU=1
PRELOAD=gpuindex FRESH=1 server/pg-start >/dev/null || exit 1
source server/pg-env.sh
# (server/pg-start unpacks the bundle afresh at every start; the unpacked
# copy's own pg-start starts what is there.)
rt=$(pgb_server_root)
if [ -n "${LIB:-}" ]; then
  "$rt/pg-stop" >/dev/null
  cp "$LIB" "$rt/usr/lib/postgresql/$PGB_PGMAJ/lib/gpuindex.so"
  [ -n "${SQL:-}" ] && cp "$SQL" "$rt/usr/share/postgresql/$PGB_PGMAJ/extension/gpuindex--0.1.0.sql"
  PRELOAD=gpuindex "$rt/pg-start" >/dev/null || exit 1
fi
status=0
regress=$(mktemp -d /tmp/regress-XXXX); chmod 777 "$regress"
tests=$(cd sql && ls *.sql | sed 's/\.sql$//' | tr '\n' ' ')
if ! pg_regress --host=$PGHOST --port=$PGPORT --user=$PGUSER --load-extension=gpuindex \
     --inputdir="$here" --outputdir="$regress" --dbname=gpuindex_regress $tests; then
  cat "$regress/regression.diffs"; status=1
fi
[ -n "${OUT:-}" ] && cp -r "$regress/results" "$OUT/regress-results" 2>/dev/null
export GPUINDEX_TEST_START="PRELOAD=gpuindex $rt/pg-start >/dev/null"
files=$(ls it/*)
[ -n "${TESTS:-}" ] && files=$(printf 'it/%s ' $TESTS)
for t in $files; do
  echo "== $t"
  "$t" --test-threads=4 || status=1
done
"$rt/pg-stop" >/dev/null
exit $status

#!/usr/bin/env bash
# Packs, for a GPU host with no Rust and no PostgreSQL, a relocatable
# PostgreSQL 15 with gpuindex installed (../shared/tools/pg-bundle), the
# integration-test binary, sql/ and expected/, and scripts/gpu-pg-tests.sh:
#
#   scripts/gpu-pg-bundle.sh [OUTDIR]          (default .gpu/pg)
#   then on the GPU host: OUTDIR/gpu-pg-tests.sh, and for the SQL benchmark
#   PRELOAD=gpuindex OUTDIR/server/pg-start; source OUTDIR/server/pg-env.sh;
#   OUTDIR/bin/gpuindex-sql-bench --rows 1e7 (gpu_btree), OUTDIR/bin/gpuindex-sql-bench-spatial (gpu_spatial),
#   OUTDIR/bin/gpuindex-sql-bench-metric (gpu_metric), OUTDIR/bin/gpuindex-sql-bench-join (GpuIndexJoin),
#   OUTDIR/bin/gpuindex-sql-bench-service (the GPU service, with pgbench),
#   OUTDIR/bin/gpuindex-sql-bench-words (gpu_metric on text; --words FILE),
#   OUTDIR/bin/gpuindex-sql-bench-pgvector (gpu_metric on pgvector's vector vs HNSW; bundle
#   built with PGVECTOR_DEST set), OUTDIR/bin/gpuindex-sql-bench-art (gpu_art vs btree and hash),
#   OUTDIR/bin/gpuindex-dataset (a bench point set as files for psql's \copy)
source "$(dirname "$0")/lib.sh"
out=${1:-$ROOT/.gpu/pg}
bundler=${PG_BUNDLE:-$ROOT/../shared/tools/pg-bundle}
cd "$ROOT"
cargo pgrx package --pg-config "$PG_CONFIG" >/dev/null
pkg=target/release/gpuindex-pg$PG_MAJOR
cp extension/gpuindex_pgvector* "$pkg/usr/share/postgresql/$PG_MAJOR/extension/"
# pgvector, where built beside (PGVECTOR_DEST: a `make install DESTDIR=`
# of it), goes into the bundle too, for the pgvector tests and benchmarks.
vector=()
if [ -n "${PGVECTOR_DEST:-}" ]; then
  vector=(--ext-so "$PGVECTOR_DEST/usr/lib/postgresql/$PG_MAJOR/lib/vector.so" --ext-share "$PGVECTOR_DEST/usr/share/postgresql/$PG_MAJOR/extension")
fi
rm -rf "$out"
"$bundler" "$out/server" --ext-so "$pkg/usr/lib/postgresql/$PG_MAJOR/lib/gpuindex.so" \
  --ext-share "$pkg/usr/share/postgresql/$PG_MAJOR/extension" "${vector[@]}" --xz >/dev/null
exe=$(cargo test -p gpuindex-tests --profile bench-build --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])')
mkdir -p "$out/it" "$out/bin"
for e in $exe; do cp "$e" "$out/it/$(basename "$e" | sed 's/-[0-9a-f]*$//')"; done
cargo build -q -p gpuindex-tests --profile bench-build --bin gpuindex-sql-bench --bin gpuindex-sql-bench-spatial --bin gpuindex-sql-bench-metric --bin gpuindex-sql-bench-join --bin gpuindex-sql-bench-service --bin gpuindex-sql-bench-words --bin gpuindex-sql-bench-pgvector --bin gpuindex-sql-bench-art --bin gpuindex-dataset
cp target/bench-build/gpuindex-sql-bench target/bench-build/gpuindex-sql-bench-spatial target/bench-build/gpuindex-sql-bench-metric \
  target/bench-build/gpuindex-sql-bench-join target/bench-build/gpuindex-sql-bench-service target/bench-build/gpuindex-sql-bench-words target/bench-build/gpuindex-sql-bench-pgvector \
  target/bench-build/gpuindex-sql-bench-art target/bench-build/gpuindex-dataset "$out/bin/"
strip "$out"/it/* "$out"/bin/*
cp -r sql expected "$out/"
cp scripts/gpu-pg-tests.sh "$out/"
du -sh "$out"

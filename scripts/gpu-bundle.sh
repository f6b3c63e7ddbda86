#!/usr/bin/env bash
# Builds the engine's test binaries and gpuindex-bench (optimised) into one
# folder, with kernels/, so that they run on a GPU host with no Rust:
#
#   scripts/gpu-bundle.sh [OUTDIR]        (default .gpu/engine)
#   OUTDIR/run-tests.sh                   every engine test binary, GPU required
#   OUTDIR/bin/gpuindex-bench [args]      the benchmark tables
#
# The kernels are embedded in the binaries (compiled by NVRTC at first use);
# kernels/ is copied beside them for reading.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpu/engine}
rm -rf "$out"
mkdir -p "$out/bin" "$out/tests"
cargo build --profile bench-build -p gpuindex-engine --bin gpuindex-bench
cp "${CARGO_TARGET_DIR:-target}/bench-build/gpuindex-bench" "$out/bin/"
cargo test --profile bench-build -p gpuindex-engine --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' |
  while read -r exe; do cp "$exe" "$out/tests/$(basename "$exe" | sed 's/-[0-9a-f]*$//')"; done
cp -r kernels "$out/"
strip "$out"/bin/* "$out"/tests/*
cat > "$out/run-tests.sh" <<'SH'
#!/usr/bin/env bash
# Runs every engine test binary with the GPU required.
set -u
cd "$(dirname "$0")"
export GPUINDEX_REQUIRE_GPU=1
status=0
for t in tests/*; do
  echo "== $t"
  "$t" --test-threads=1 || status=1
done
exit $status
SH
chmod +x "$out/run-tests.sh"
du -sh "$out"
ls "$out/tests"

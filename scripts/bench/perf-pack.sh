#!/bin/bash
# Packs this machine's perf (Debian 12's linux-perf) with the libraries it
# needs, less the C runtime the GPU host has, into OUT (default
# .gpu/r/perf.tar.xz), for fused-sum-profile.sh on the GPU host (it has
# no perf): unpacked to /tmp/perfpkg, run as
# `LD_LIBRARY_PATH=/tmp/perfpkg/lib /tmp/perfpkg/perf`.
set -eu
out=${1:-.gpu/r/perf.tar.xz}
perf=$(command -v perf) || { apt-get install -y linux-perf >/dev/null && perf=$(command -v perf); }
rm -rf /tmp/perfpkg && mkdir -p /tmp/perfpkg/lib && cp "$perf" /tmp/perfpkg/perf
for l in $(ldd "$perf" | awk '{print $3}' | grep -v '^$'); do
  case $(basename "$l") in libc.so* | libm.so* | libstdc++* | libgcc_s* | ld-linux*) ;; *) cp -L "$l" /tmp/perfpkg/lib/ ;; esac
done
tar cJf "$out" -C /tmp perfpkg
ls -la "$out"

#!/usr/bin/env python3
"""Compiles every CUDA kernel in kernels/ with NVRTC, as the engine does at
run time, on a machine without a GPU: a kernel that does not compile fails
here instead of on the first GPU host.

NVRTC comes from PyPI's nvidia-cuda-nvrtc-cu12 wheel (pinned, checked by
its sha256), fetched once into ~/.cache/gpuindex/nvrtc with no pip needed.
Where it cannot be fetched (no network), says so and skips.

    python3 scripts/check-kernels.py
"""
import ctypes
import hashlib
import json
import os
import pathlib
import sys
import urllib.request
import zipfile

PACKAGE, VERSION = "nvidia-cuda-nvrtc-cu12", "12.9.86"
# The oldest architecture the engine accepts (compute capability 7.0) and
# the H100's.
ARCHS = ["compute_70", "compute_90"]
ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "gpuindex" / "nvrtc" / VERSION


def fetch_nvrtc() -> pathlib.Path:
    lib = CACHE / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12"
    if lib.exists():
        return lib
    # PEP 691: the simple index as JSON.
    req = urllib.request.Request(f"https://pypi.org/simple/{PACKAGE}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
    prefix = f"{PACKAGE.replace('-', '_')}-{VERSION}-"
    wheel = next(f for f in files if f["filename"].startswith(prefix) and "manylinux" in f["filename"] and "x86_64" in f["filename"])
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / wheel["filename"]
    with urllib.request.urlopen(wheel["url"], timeout=600) as r, open(path, "wb") as f:
        f.write(r.read())
    if hashlib.sha256(path.read_bytes()).hexdigest() != wheel["hashes"]["sha256"]:
        path.unlink()
        sys.exit(f"{wheel['filename']}: sha256 mismatch")
    with zipfile.ZipFile(path) as z:
        z.extractall(CACHE, [n for n in z.namelist() if n.startswith("nvidia/cuda_nvrtc/lib/")])
    path.unlink()
    return lib


def compile_kernel(nvrtc, path: pathlib.Path, arch: str) -> str | None:
    """None when it compiles, else NVRTC's log."""
    prog = ctypes.c_void_p()
    src = path.read_bytes()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, path.name.encode(), 0, None, None) != 0:
        return "nvrtcCreateProgram failed"
    opts = [f"--gpu-architecture={arch}".encode(), b"--device-int128"]
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return None if rc == 0 else log.value.decode(errors="replace")


def main() -> int:
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        print("kernel check: skipped (NVRTC wheels used here are for x86_64 Linux)")
        return 0
    try:
        lib = fetch_nvrtc()
    except Exception as e:  # network or index unavailable: not a kernel failure
        print(f"kernel check: skipped, NVRTC could not be fetched from PyPI ({e})")
        return 0
    # libnvrtc loads its builtins library from beside it.
    ctypes.CDLL(str(lib.parent / "libnvrtc-builtins.so.12.9"), mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(str(lib))
    failed = 0
    for path in sorted((ROOT / "kernels").glob("*.cu")):
        for arch in ARCHS:
            log = compile_kernel(nvrtc, path, arch)
            if log is None:
                print(f"kernel check: {path.name} compiles for {arch} (NVRTC {VERSION})")
            else:
                failed += 1
                print(f"kernel check: {path.name} does not compile for {arch}:\n{log}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

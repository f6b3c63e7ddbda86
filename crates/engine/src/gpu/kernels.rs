//! The CUDA sources of `kernels/`, embedded at build time so that a binary
//! needs no files beside it; each is compiled with NVRTC at first use.

/// One `.cu` file of `kernels/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! kernel {
    ($name:literal) => {
        KernelSource { name: $name, source: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../kernels/", $name, ".cu")) }
    };
}

pub const SORTED_LOOKUP: KernelSource = kernel!("sorted_lookup");
pub const HBTREE: KernelSource = kernel!("hbtree");
pub const GPICS: KernelSource = kernel!("gpics");
pub const SCAN: KernelSource = kernel!("scan");
pub const GTS: KernelSource = kernel!("gts");
pub const PGM: KernelSource = kernel!("pgm");
pub const ART: KernelSource = kernel!("art");
pub const SORT: KernelSource = kernel!("sort");

/// Every kernel source, for `Gpu::compile_all`.
pub const ALL: &[KernelSource] = &[SORTED_LOOKUP, HBTREE, GPICS, SCAN, GTS, PGM, ART, SORT];

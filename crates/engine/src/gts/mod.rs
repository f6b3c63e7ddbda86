//! GTS (Zhu et al., SIGMOD 2024; `notes/002_gts.md`): a balanced pivot
//! tree for exact similarity search in a metric space. Every node is a
//! contiguous range of one object permutation; an internal node's pivot
//! splits its range, sorted by distance to the pivot, into `fanout`
//! equal-count children, each keeping the [min, max] of those distances
//! (the two-sided ring the triangle inequality tests).
//!
//! - `metric`: the distances (L2, L1, cosine) and the slack that keeps
//!   pruning exact under floating-point rounding;
//! - `tree`: the level-by-level build on all cores;
//! - `float4`: lower bounds of the same distances computed in float4
//!   elsewhere (pgvector), for scans whose executor rechecks the order;
//! - `bounded`: L2 kNN over every object, bounded in float4 and rechecked
//!   exactly, on all cores (where the tree prunes little);
//! - `gpu`: the same searches on the GPU, level by level over (query,
//!   node) pairs;
//! - `gpu_build`: the build on the GPU, the same tree;
//! - `search`: exact k-nearest and range search, batched or one row at a
//!   time in distance order, over leaves read through a trait (pages in
//!   the extension, memory in tests).

pub mod bounded;
pub mod float4;
pub mod gpu;
pub mod gpu_build;
pub mod metric;
pub mod search;
pub mod tree;

pub use metric::Metric;
pub use search::{Leaves, Nearest};
pub use tree::{Node, Params, Shape, Tree, Vectors};

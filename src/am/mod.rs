//! The index access methods, one folder each.

pub mod common;
pub mod gpu_btree;
pub mod gpu_spatial;

//! What every access method shares. An access method implements
//! `IndexAm` (what differs) and calls `index_am!` (the routine and the C
//! callbacks); its SQL functions open indexes with `OpenIndex` (the
//! privilege guard) and return rows through `OpenIndex::visible`
//! (snapshot and row-level security); its derived images live in `cache`.

pub mod am;
pub mod build;
pub mod cache;
pub mod cost;
pub mod open;
pub mod options;
pub mod policies;
pub mod scan;
pub mod vacuum;
pub mod validate;

pub use am::{Estimate, HeapRows, IndexAm};
pub use open::{Access, OpenIndex};

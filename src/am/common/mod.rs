//! What every access method shares: opening an index for a SQL function
//! (with the privilege guard), applying row-level security to the rows a
//! function returns, and the per-backend cache of index images.

pub mod cache;
pub mod open;
pub mod policies;

pub use open::{Access, OpenIndex};

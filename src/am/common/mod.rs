//! What every access method shares: opening an index for a SQL function
//! (with the privilege guard), and applying row-level security to the rows
//! a function returns.

pub mod open;
pub mod policies;

pub use open::{Access, OpenIndex};

//! SQL functions.

pub(crate) mod call;
mod device_info;
pub mod estimate;
mod lower_bound;
mod search;

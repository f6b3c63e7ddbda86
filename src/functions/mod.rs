//! SQL functions.

pub(crate) mod call;
mod device_info;
mod estimate;
mod lower_bound;
mod search;

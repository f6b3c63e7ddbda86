//! SQL functions.

pub(crate) mod call;
mod device_info;
mod lower_bound;
mod search;

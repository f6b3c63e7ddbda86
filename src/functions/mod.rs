//! SQL functions.

mod device_info;
mod lower_bound;
mod search;

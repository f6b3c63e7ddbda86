//! amvalidate: a gpu_metric operator class is for `real[]` and holds one
//! ordering operator `(real[], real[])` of strategy 1 (L2), 2 (L1) or 3
//! (cosine), with no support functions.

use crate::am::common::validate::OpClass;
use pgrx::pg_sys::FLOAT4ARRAYOID;

pub fn check(c: &OpClass) -> Vec<String> {
    let name = &c.name;
    let mut problems = Vec::new();
    if c.input_type != FLOAT4ARRAYOID {
        problems.push(format!("{name}: type {} is not supported", c.input_type.to_u32()));
    }
    for op in &c.operators {
        if !matches!((op.strategy, op.left, op.right, op.purpose), (1..=3, FLOAT4ARRAYOID, FLOAT4ARRAYOID, b'o')) {
            problems.push(format!(
                "{name}: operator of strategy {} ({}, {}) for purpose {} is not supported",
                op.strategy,
                op.left.to_u32(),
                op.right.to_u32(),
                op.purpose as char
            ));
        }
    }
    if c.operators.len() != 1 {
        problems.push(format!("{name}: a gpu_metric operator class has one distance operator, found {}", c.operators.len()));
    }
    if c.procs != 0 {
        problems.push(format!("{name}: gpu_metric uses no support functions, found {}", c.procs));
    }
    problems
}

//! amvalidate: a gpu_metric operator class is for `real[]` and holds one
//! ordering operator `(real[], real[])` of strategy 1 (L2), 2 (L1) or 3
//! (cosine), and at most one ball operator `(real[], <distance>_ball)` of
//! strategy 4, with no support functions.

use crate::am::common::validate::OpClass;
use pgrx::pg_sys::FLOAT4ARRAYOID;

pub fn check(c: &OpClass) -> Vec<String> {
    let name = &c.name;
    let mut problems = Vec::new();
    if c.input_type != FLOAT4ARRAYOID {
        problems.push(format!("{name}: type {} is not supported", c.input_type.to_u32()));
    }
    let (mut orderings, mut balls) = (0, 0);
    for op in &c.operators {
        let right = crate::error::type_name(op.right);
        let ball = ["l2_ball", "l1_ball", "cosine_ball"].contains(&right.rsplit('.').next().unwrap_or(""));
        match (op.strategy, op.left, op.purpose) {
            (1..=3, FLOAT4ARRAYOID, b'o') if op.right == FLOAT4ARRAYOID => orderings += 1,
            (4, FLOAT4ARRAYOID, b's') if ball => balls += 1,
            _ => problems.push(format!(
                "{name}: operator of strategy {} ({}, {}) for purpose {} is not supported",
                op.strategy,
                op.left.to_u32(),
                op.right.to_u32(),
                op.purpose as char
            )),
        }
    }
    if orderings != 1 || balls > 1 {
        problems.push(format!("{name}: a gpu_metric operator class has one distance operator and at most one ball operator"));
    }
    if c.procs != 0 {
        problems.push(format!("{name}: gpu_metric uses no support functions, found {}", c.procs));
    }
    problems
}

//! amvalidate: a gpu_spatial operator class is for `point` and holds only
//! the operators gpu_spatial answers: `<@ (point, box)` (28), `<@ (point,
//! circle)` (68), `~= (point, point)` (6) for search and `<-> (point,
//! point)` (15) for ORDER BY, with no support functions.

use crate::am::common::validate::OpClass;
use pgrx::pg_sys::{BOXOID, CIRCLEOID, POINTOID};

pub fn check(c: &OpClass) -> Vec<String> {
    let name = &c.name;
    let mut problems = Vec::new();
    if c.input_type != POINTOID {
        problems.push(format!("{name}: type {} is not supported", c.input_type.to_u32()));
    }
    for op in &c.operators {
        let ok = matches!(
            (op.strategy, op.left, op.right, op.purpose),
            (28, POINTOID, BOXOID, b's') | (68, POINTOID, CIRCLEOID, b's') | (6, POINTOID, POINTOID, b's') | (15, POINTOID, POINTOID, b'o')
        );
        if !ok {
            problems.push(format!(
                "{name}: operator of strategy {} ({}, {}) for purpose {} is not supported",
                op.strategy,
                op.left.to_u32(),
                op.right.to_u32(),
                op.purpose as char
            ));
        }
    }
    if c.procs != 0 {
        problems.push(format!("{name}: gpu_spatial uses no support functions, found {}", c.procs));
    }
    problems
}

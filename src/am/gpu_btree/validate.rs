//! amvalidate: an operator class of gpu_btree must be for a supported type,
//! have only search operators of btree strategies 1..5 between types of
//! the same family, all five for its own type, and no support functions.

use super::keys;
use crate::am::common::validate::OpClass;

pub fn check(c: &OpClass) -> Vec<String> {
    let name = &c.name;
    let Some(fam) = keys::family_of(c.input_type) else {
        return vec![format!("{name}: type {} is not supported", c.input_type.to_u32())];
    };
    let mut problems = Vec::new();
    let mut own = [false; 6];
    for op in &c.operators {
        let (strategy, purpose) = (op.strategy, op.purpose as char);
        if purpose != 's' || !(1..=5).contains(&strategy) {
            problems.push(format!("{name}: operator of strategy {strategy} and purpose {purpose} is not supported"));
        }
        if keys::family_of(op.left) != Some(fam) || keys::family_of(op.right) != Some(fam) {
            problems.push(format!("{name}: operator between {} and {} crosses families", op.left.to_u32(), op.right.to_u32()));
        }
        if op.left == c.input_type && op.right == c.input_type && (1..=5).contains(&strategy) {
            own[strategy as usize] = true;
        }
    }
    if own[1..].iter().any(|x| !x) {
        problems.push(format!("{name}: strategies 1..5 are not all present for its own type"));
    }
    if c.procs != 0 {
        problems.push(format!("{name}: gpu_btree uses no support functions, found {}", c.procs));
    }
    problems
}

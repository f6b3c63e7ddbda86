//! amvalidate: a gpu_metric operator class is for `real[]` (or pgvector's
//! `vector`) and holds one ordering operator `(type, type)` of strategy 1
//! (L2), 2 (L1) or 3 (cosine), or for `text` and holds `(text, text)` of
//! strategy 5 (edit distance); and at most one ball operator
//! `(type, <distance>_ball)` of strategy 4, with no support functions.

use crate::am::common::validate::OpClass;
use pgrx::pg_sys::{FLOAT4ARRAYOID, TEXTOID};

pub fn check(c: &OpClass) -> Vec<String> {
    let name = &c.name;
    let mut problems = Vec::new();
    let t = c.input_type;
    if t != FLOAT4ARRAYOID && t != TEXTOID && !super::pgvector::is_vector_type(t) {
        problems.push(format!("{name}: type {} is not supported", t.to_u32()));
    }
    let distances = if t == TEXTOID { 5..=5 } else { 1..=3 };
    let (mut orderings, mut balls) = (0, 0);
    for op in &c.operators {
        let right = crate::error::type_name(op.right);
        let balls_of_type: &[&str] = if t == TEXTOID { &["levenshtein_ball"] } else { &["l2_ball", "l1_ball", "cosine_ball"] };
        let ball = balls_of_type.contains(&right.rsplit('.').next().unwrap_or(""));
        match (op.strategy, op.purpose) {
            (s, b'o') if distances.contains(&s) && op.left == t && op.right == t => orderings += 1,
            (4, b's') if op.left == t && ball => balls += 1,
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

//! amvalidate: an operator class of gpu_btree must be for a supported type,
//! have only search operators of btree strategies 1..5 between types of
//! the same family, all five for its own type, and no support functions.

use super::keys;
use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
pub unsafe extern "C-unwind" fn amvalidate(opclass: pg_sys::Oid) -> bool {
    let problems = Spi::connect(|c| -> Result<Vec<String>, pgrx::spi::Error> {
        let mut problems = Vec::new();
        let row = c.select("SELECT opcintype, opcfamily, opcname::text FROM pg_opclass WHERE oid = $1", None, &[opclass.into()])?;
        let Some(r) = row.into_iter().next() else { return Ok(vec![format!("operator class {opclass:?} not found")]) };
        let (intype, family, name): (pg_sys::Oid, pg_sys::Oid, String) = (r.get(1)?.unwrap(), r.get(2)?.unwrap(), r.get(3)?.unwrap());
        let Some(fam) = keys::family_of(intype) else { return Ok(vec![format!("{name}: type {intype:?} is not supported")]) };
        let ops = c.select(
            "SELECT amopstrategy::int, amoplefttype, amoprighttype, amoppurpose::text FROM pg_amop WHERE amopfamily = $1",
            None,
            &[family.into()],
        )?;
        let mut own = [false; 6];
        for r in ops {
            let (strategy, left, right, purpose): (i32, pg_sys::Oid, pg_sys::Oid, String) =
                (r.get(1)?.unwrap(), r.get(2)?.unwrap(), r.get(3)?.unwrap(), r.get(4)?.unwrap());
            if purpose != "s" || !(1..=5).contains(&strategy) {
                problems.push(format!("{name}: operator of strategy {strategy} and purpose {purpose} is not supported"));
            }
            if keys::family_of(left) != Some(fam) || keys::family_of(right) != Some(fam) {
                problems.push(format!("{name}: operator between {left:?} and {right:?} crosses families"));
            }
            if left == intype && right == intype && (1..=5).contains(&strategy) {
                own[strategy as usize] = true;
            }
        }
        if own[1..].iter().any(|x| !x) {
            problems.push(format!("{name}: strategies 1..5 are not all present for its own type"));
        }
        let procs: i64 =
            c.select("SELECT count(*) FROM pg_amproc WHERE amprocfamily = $1", None, &[family.into()])?.first().get(1)?.unwrap_or(0);
        if procs != 0 {
            problems.push(format!("{name}: gpu_btree uses no support functions, found {procs}"));
        }
        Ok(problems)
    })
    .unwrap_or_else(|e| vec![format!("catalog query failed: {e}")]);
    for p in &problems {
        info!("gpu_btree operator class: {p}");
    }
    problems.is_empty()
}

//! amvalidate: a gpu_spatial operator class is for `point` and holds only
//! the operators gpu_spatial answers: `<@ (point, box)` (28), `<@ (point,
//! circle)` (68), `~= (point, point)` (6) for search and `<-> (point,
//! point)` (15) for ORDER BY, with no support functions.

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
pub unsafe extern "C-unwind" fn amvalidate(opclass: pg_sys::Oid) -> bool {
    let problems = Spi::connect(|c| -> Result<Vec<String>, pgrx::spi::Error> {
        let mut problems = Vec::new();
        let row =
            c.select("SELECT opcintype::regtype::text, opcfamily, opcname::text FROM pg_opclass WHERE oid = $1", None, &[opclass.into()])?;
        let Some(r) = row.into_iter().next() else { return Ok(vec![format!("operator class {opclass:?} not found")]) };
        let (intype, family, name): (String, pg_sys::Oid, String) = (r.get(1)?.unwrap(), r.get(2)?.unwrap(), r.get(3)?.unwrap());
        if intype != "point" {
            problems.push(format!("{name}: type {intype} is not supported"));
        }
        let ops = c.select(
            "SELECT amopstrategy::int, amoplefttype::regtype::text, amoprighttype::regtype::text, amoppurpose::text
               FROM pg_amop WHERE amopfamily = $1",
            None,
            &[family.into()],
        )?;
        for r in ops {
            let (strategy, left, right, purpose): (i32, String, String, String) =
                (r.get(1)?.unwrap(), r.get(2)?.unwrap(), r.get(3)?.unwrap(), r.get(4)?.unwrap());
            let ok = matches!(
                (strategy, left.as_str(), right.as_str(), purpose.as_str()),
                (28, "point", "box", "s") | (68, "point", "circle", "s") | (6, "point", "point", "s") | (15, "point", "point", "o")
            );
            if !ok {
                problems.push(format!("{name}: operator of strategy {strategy} ({left}, {right}) for purpose {purpose} is not supported"));
            }
        }
        let procs: i64 =
            c.select("SELECT count(*) FROM pg_amproc WHERE amprocfamily = $1", None, &[family.into()])?.first().get(1)?.unwrap_or(0);
        if procs != 0 {
            problems.push(format!("{name}: gpu_spatial uses no support functions, found {procs}"));
        }
        Ok(problems)
    })
    .unwrap_or_else(|e| vec![format!("catalog query failed: {e}")]);
    for p in &problems {
        info!("gpu_spatial operator class: {p}");
    }
    problems.is_empty()
}

//! The load of a backend's copy of an index, priced as a ski rental.
//!
//! Where no GPU service answers, gpu_spatial and gpu_metric batches search
//! the backend's own copy of the index, read once
//! (`BatchSearch::load_cost`). Priced whole into every plan that would
//! read it, a join that wins only once the copy is held was never planned
//! in a session that did not hold it, so nothing loaded it: a session
//! without a GPU service ran a kNN LATERAL join of 10^4 centres over 10^7
//! points as a nested loop of index scans, 388 ms each time, where the
//! join takes 70 ms with the copy held and the load 0.25 s once (locally).
//!
//! So each statement whose join lost only for the load (it would have been
//! cheaper than the cheapest path planned beside it with the copy held)
//! adds what it forwent, that path's cost less the join's without the
//! load, to the index's tally in this backend; once the tally of earlier
//! statements reaches the load, the load is priced at nothing and the next
//! such plan loads the copy. As in the ski-rental problem, a session then
//! pays at most twice what it would have paid knowing its statements in
//! advance (in the planner's units, as far as they are right); a statement
//! whose join would save nothing adds nothing, so small queries never make
//! a big index load.

use pgrx::pg_sys;
use std::cell::RefCell;
use std::collections::HashMap;

#[derive(Default)]
struct Tally {
    /// What earlier statements forwent.
    earlier: f64,
    /// The statement now planned (its start), and the most it forwent.
    statement: i64,
    this: f64,
}

thread_local! {
    static TALLIES: RefCell<HashMap<pg_sys::Oid, Tally>> = RefCell::new(HashMap::new());
}

/// The statement being planned: its start (statement_timestamp(), the
/// receipt of the client's message; statements of one message count as
/// one, which only makes the tally slower to grow).
fn statement() -> i64 {
    // SAFETY: a backend's own clock of its current statement.
    unsafe { pg_sys::GetCurrentStatementStartTimestamp() }
}

/// The tally of `index` with the statements before the current one
/// folded in.
fn with_tally<R>(index: pg_sys::Oid, f: impl FnOnce(&mut Tally) -> R) -> R {
    TALLIES.with(|t| {
        let mut tallies = t.borrow_mut();
        let tally = tallies.entry(index).or_default();
        let now = statement();
        if tally.statement != now {
            tally.earlier += std::mem::take(&mut tally.this);
            tally.statement = now;
        }
        f(tally)
    })
}

/// What a plan pays for this backend's `load` of `index` (the access
/// method's price; 0 where it holds the copy or a service answers):
/// nothing once earlier statements forwent as much.
pub fn priced(index: pg_sys::Oid, load: f64) -> f64 {
    if load <= 0.0 {
        return 0.0;
    }
    with_tally(index, |t| if t.earlier >= load { 0.0 } else { load })
}

/// Notes a join over `index` that paid `load` (as `priced`) in `total`
/// and lost to a path of cost `best`: what it would have saved with the
/// copy held.
pub fn lost(index: pg_sys::Oid, load: f64, total: f64, best: f64) {
    let saving = best - (total - load);
    if load > 0.0 && best < total && saving > 0.0 {
        with_tally(index, |t| t.this = t.this.max(saving));
    }
}

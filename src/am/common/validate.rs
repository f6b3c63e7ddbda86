//! amvalidate: reads an operator class and its family from the catalog
//! caches and asks the access method what is wrong with them; each
//! problem is reported as an INFO, as the core access methods do.

use super::am::IndexAm;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// One operator of a family.
pub struct Operator {
    pub strategy: u16,
    pub left: pg_sys::Oid,
    pub right: pg_sys::Oid,
    /// b's' (search) or b'o' (ordering).
    pub purpose: u8,
}

/// An operator class as amvalidate sees it.
pub struct OpClass {
    pub name: String,
    pub input_type: pg_sys::Oid,
    pub operators: Vec<Operator>,
    /// Support functions in its family.
    pub procs: usize,
}

/// The members of a catalog-cache list search on `family`.
///
/// # Safety
/// A backend inside a transaction; `T` is the catalog's row struct.
unsafe fn family_members<T: Copy>(cache: i32, family: pg_sys::Oid) -> Vec<T> {
    // SAFETY: as the caller's; the list is released before returning.
    unsafe {
        let list = pg_sys::SearchSysCacheList(cache, 1, pg_sys::Datum::from(family), 0.into(), 0.into());
        let n = (*list).n_members as usize;
        let members = (*list).members.as_slice(n);
        let out = members.iter().map(|&ct| *pg_sys::heap_tuple_get_struct::<T>(&mut (*ct).tuple)).collect();
        pg_sys::ReleaseCatCacheList(list);
        out
    }
}

fn read(opclass: pg_sys::Oid) -> Option<OpClass> {
    // SAFETY: catalog-cache lookups, released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::CLAOID as i32, pg_sys::Datum::from(opclass));
        if tup.is_null() {
            return None;
        }
        let c = *pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_opclass>(tup);
        pg_sys::ReleaseSysCache(tup);
        let operators = family_members::<pg_sys::FormData_pg_amop>(pg_sys::SysCacheIdentifier::AMOPSTRATEGY as i32, c.opcfamily)
            .into_iter()
            .map(|o| Operator {
                strategy: o.amopstrategy as u16,
                left: o.amoplefttype,
                right: o.amoprighttype,
                purpose: o.amoppurpose as u8,
            })
            .collect();
        let procs = family_members::<pg_sys::FormData_pg_amproc>(pg_sys::SysCacheIdentifier::AMPROCNUM as i32, c.opcfamily).len();
        Some(OpClass { name: pgrx::name_data_to_str(&c.opcname).to_string(), input_type: c.opcintype, operators, procs })
    }
}

pub fn amvalidate<A: IndexAm>(opclass: pg_sys::Oid) -> bool {
    let problems = match read(opclass) {
        Some(c) => A::check_opclass(&c),
        None => vec![format!("operator class {} not found", opclass.to_u32())],
    };
    for p in &problems {
        info!("{} operator class: {p}", A::NAME);
    }
    problems.is_empty()
}

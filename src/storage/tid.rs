//! Heap TIDs as ordered integers (block << 16 | offset): compact in memory,
//! sortable into heap order.

use pgrx::pg_sys;

pub type Tid = u64;

pub fn tid_from(p: pg_sys::ItemPointerData) -> Tid {
    let block = ((p.ip_blkid.bi_hi as u64) << 16) | p.ip_blkid.bi_lo as u64;
    (block << 16) | p.ip_posid as u64
}

pub fn tid_to(t: Tid) -> pg_sys::ItemPointerData {
    let block = (t >> 16) as u32;
    pg_sys::ItemPointerData { ip_blkid: pg_sys::BlockIdData { bi_hi: (block >> 16) as u16, bi_lo: block as u16 }, ip_posid: t as u16 }
}

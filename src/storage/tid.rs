//! Heap TIDs as ordered integers (block << 16 | offset): compact in memory,
//! sortable into heap order.

use pgrx::pg_sys;

pub type Tid = u64;

pub fn tid_from(p: pg_sys::ItemPointerData) -> Tid {
    let block = ((p.ip_blkid.bi_hi as u64) << 16) | p.ip_blkid.bi_lo as u64;
    (block << 16) | p.ip_posid as u64
}

/// The TID of an ItemPointerData's six bytes as stored on a page
/// (bi_hi, bi_lo, ip_posid, each native-endian): `tid_from` without the
/// unaligned struct read, for copying runs of them.
#[inline(always)]
pub fn tid_from_bytes(b: &[u8]) -> Tid {
    let half = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]) as u64;
    half(0) << 32 | half(2) << 16 | half(4)
}

pub fn tid_to(t: Tid) -> pg_sys::ItemPointerData {
    let block = (t >> 16) as u32;
    pg_sys::ItemPointerData { ip_blkid: pg_sys::BlockIdData { bi_hi: (block >> 16) as u16, bi_lo: block as u16 }, ip_posid: t as u16 }
}

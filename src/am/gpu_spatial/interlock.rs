//! The interlock between index-only scans and VACUUM. An index-only scan
//! trusts the visibility map, so VACUUM must not remove an entry a scan
//! has read but not returned yet: the heap pass would free the tuple and
//! mark its page all-visible, and the scan would return a dead row.
//! nbtree's interlock is a pin on the page being returned from, which
//! VACUUM's cleanup lock waits for; a gpu_spatial scan returns entries
//! gathered from many leaves (a kNN walk keeps a frontier of leaves open),
//! so it holds a heavyweight share lock instead, on one of two lock tags
//! chosen by the metapage's vacuum count (the epoch). Bulk delete, after
//! removing entries, bumps the epoch and waits for the old tag's holders:
//! every scan that may have read a removed entry has ended. Scans starting
//! meanwhile take the other tag, so they neither wait behind an old
//! cursor nor read a removed entry (the pages are clean by then).
//!
//! On a hot standby nothing waits: replay of a bulk delete does not look
//! for scans (as for gpu_btree; nbtree's replay takes cleanup locks).

use super::shape;
use pgrx::pg_sys;

/// The lock tag of an epoch: a pseudo block number no page has (page
/// locks are tags; nothing checks that the block exists).
fn tag(epoch: u64) -> u32 {
    pg_sys::InvalidBlockNumber - 1 - (epoch % 2) as u32
}

/// A scan's share lock (the index, open for the scan, and the tag);
/// released by `release`, not on drop: an abort releases it first, with
/// the scan's resource owner.
pub struct ScanLock(pg_sys::Relation, u32);

/// Takes the share lock of the current epoch.
pub fn lock_for_scan(rel: pg_sys::Relation) -> ScanLock {
    loop {
        let epoch = shape::meta(rel).vacuums;
        // SAFETY: heavyweight page locks on an open relation.
        unsafe {
            pg_sys::LockPage(rel, tag(epoch), pg_sys::ShareLock as i32);
            // A bump between the read and the lock: the bulk delete may
            // not have waited for this lock; take the new epoch's.
            if shape::meta(rel).vacuums == epoch {
                return ScanLock(rel, tag(epoch));
            }
            pg_sys::UnlockPage(rel, tag(epoch), pg_sys::ShareLock as i32);
        }
    }
}

impl ScanLock {
    pub fn release(self) {
        // SAFETY: taken by lock_for_scan in this backend, on an index the
        // scan keeps open.
        unsafe { pg_sys::UnlockPage(self.0, self.1, pg_sys::ShareLock as i32) };
    }
}

/// Waits until every scan that took the lock of `old_epoch` has ended
/// (called after the epoch was bumped past it).
pub fn wait_for_scans(rel: pg_sys::Relation, old_epoch: u64) {
    // SAFETY: heavyweight page locks on an open relation.
    unsafe {
        pg_sys::LockPage(rel, tag(old_epoch), pg_sys::ExclusiveLock as i32);
        pg_sys::UnlockPage(rel, tag(old_epoch), pg_sys::ExclusiveLock as i32);
    }
}

//! Page deletion (VACUUM), in nbtree's two stages, each one WAL record:
//!
//! 1. half-dead: an empty leaf that is neither leftmost nor rightmost nor
//!    its parent's last child loses its downlink, and its key range goes
//!    to its right sibling (whose downlink, next in the same parent, now
//!    covers it; its low fence moves down). Descents no longer reach it;
//!    scans that do move right.
//! 2. deleted: its left sibling's right link and its right sibling's left
//!    link skip it; it keeps its own links for scans already on it, and
//!    takes a safe xid. Once no snapshot is older, VACUUM gives it to the
//!    free space map (`recycle`) and writers reuse it.
//!
//! A crash between the stages leaves a half-dead page, which the next
//! VACUUM unlinks. Empty NULL pages leave their chain in one record
//! (`delete_empty_null_page`) and are recycled the same way. Inner pages
//! are never deleted: a parent keeps at least its last child, so the
//! tree's shape above the leaves only grows.
//! Locks follow the writers' order (left to right on a level, child
//! before parent); the parent is found by a descent while the two leaves
//! are held, as a split finds it.

use super::page::Exclusive;
use super::page::*;
use super::tree::{Locked, Tree};
use crate::storage::{recycle, Xlog};

/// Deletes the empty leaf `leaf` (exclusively locked, not dead) if it
/// may go; returns whether it did.
pub fn delete_empty_leaf(tree: &Tree, leaf: Exclusive) -> bool {
    let block = leaf.block();
    mark_half_dead(tree, leaf) && {
        // SAFETY: VACUUM's cost-delay point, with no lock held.
        unsafe { pgrx::pg_sys::vacuum_delay_point() };
        unlink(tree, block);
        true
    }
}

/// Stage 1. False (nothing changed) where the leaf must stay: not empty,
/// at either end of its level or of its parent, or beside a dead page or a
/// missing downlink (a split a crash interrupted).
fn mark_half_dead(tree: &Tree, leaf: Exclusive) -> bool {
    let s = leaf.page().special();
    if s.count != 0 || is_dead(&s) || s.flags & (LEFTMOST | RIGHTMOST) != 0 {
        return false;
    }
    let right = Exclusive::lock(tree.rel, s.right);
    if is_dead(&right.page().special()) {
        return false;
    }
    // A parent's entry for a child is keyed by the child's high key.
    let Locked::X(start) = tree.descend(s.high, 1, true, &mut Vec::new()) else { unreachable!("exclusive descent") };
    let Some((parent, j)) = tree.find_parent(start, leaf.block()) else { return false };
    let (mut keys, mut children) = {
        let p = Inner::new(parent.page());
        if j + 1 >= p.count() || p.child(j + 1) != right.block() {
            return false;
        }
        (p.keys().to_vec(), (0..p.count()).map(|i| p.child(i)).collect::<Vec<_>>())
    };
    keys.remove(j);
    children.remove(j);
    let x = Xlog::start(tree.rel);
    inner_set(&mut x.register(&parent, false), &keys, &children);
    x.register(&leaf, false).update_special(|t| t.flags |= HALF_DEAD);
    x.register(&right, false).update_special(|t| t.low = s.low);
    x.finish();
    true
}

/// Stage 2 for the half-dead leaf `block`: locks its left sibling (found
/// by walking right from its left link), itself, its right sibling and the
/// metapage (which counts deleted pages), in that order.
pub fn unlink(tree: &Tree, block: u32) {
    let left_link = Shared::lock(tree.rel, block).page().special().left;
    let mut left = Exclusive::lock(tree.rel, left_link);
    loop {
        let s = left.page().special();
        if s.right == block {
            break;
        }
        if s.flags & RIGHTMOST != 0 {
            corrupted(format!("half-dead leaf {block} is not linked from the left"));
        }
        drop(left);
        left = Exclusive::lock(tree.rel, s.right);
    }
    let target = Exclusive::lock(tree.rel, block);
    let ts = target.page().special();
    if ts.flags & HALF_DEAD == 0 || ts.left != left.block() {
        corrupted(format!("leaf {block} changed while being unlinked (flags {:#x}, left {})", ts.flags, ts.left));
    }
    let right = Exclusive::lock(tree.rel, ts.right);
    let meta = Exclusive::lock(tree.rel, META_BLOCK);
    let x = Xlog::start(tree.rel);
    x.register(&left, false).update_special(|t| t.right = ts.right);
    x.register(&right, false).update_special(|t| t.left = left.block());
    set_deleted(&mut x.register(&target, false), recycle::safe_xid_now());
    let mut mp = x.register(&meta, false);
    let mut m = read_meta(mp.as_ref());
    m.deleted_pages += 1;
    write_meta(&mut mp, &m);
    x.finish();
}

/// Takes the empty NULL page `block` off the NULL chain, if it still is
/// empty and not the chain's tail (inserts append there): in one record,
/// the link to it (the metapage's head, or the page before it, `prev`)
/// skips it and it is marked deleted at a safe xid; it keeps its right
/// link for scans that read the old link. Locks the metapage (as inserts
/// do, first), then `prev`, then the page. Returns whether it did.
pub fn delete_empty_null_page(tree: &Tree, prev: u32, block: u32) -> bool {
    let meta = Exclusive::lock(tree.rel, META_BLOCK);
    let mut m = read_meta(meta.page());
    let left = (prev != NONE).then(|| Exclusive::lock(tree.rel, prev));
    let linked = match &left {
        Some(l) => l.page().special().right == block,
        None => m.null_head == block,
    };
    if !linked || m.null_tail == block {
        return false;
    }
    let target = Exclusive::lock(tree.rel, block);
    let ts = target.page().special();
    if ts.count != 0 || ts.right == NONE || is_dead(&ts) {
        return false;
    }
    let x = Xlog::start(tree.rel);
    match &left {
        Some(l) => x.register(l, false).update_special(|t| t.right = ts.right),
        None => m.null_head = ts.right,
    }
    set_deleted(&mut x.register(&target, false), recycle::safe_xid_now());
    m.deleted_pages += 1;
    write_meta(&mut x.register(&meta, false), &m);
    x.finish();
    true
}

//! Page deletion (VACUUM), in nbtree's two stages:
//!
//! 1. half-dead (one record): an empty leaf that is not the rightmost
//!    loses, with the parents it is the only descendant of (its
//!    subtree), the downlink of the highest of them (`top`), whose parent
//!    must keep another child right of it: that child, the top's right
//!    sibling, takes the subtree's key range (its leftmost leaf, the
//!    leaf's right sibling, gets the leaf's low fence). The leaf is marked
//!    half-dead and names the top (`top_of`). Descents no longer reach
//!    the subtree; scans that do move right. The metapage counts every
//!    page that will be deleted.
//! 2. unlinked, top down, one record a page: the top's left sibling's
//!    right link skips it, its right sibling takes its low fence, it is
//!    marked deleted at a safe xid (keeping its right link for scans and
//!    descents already on their way to it), and the leaf names the top's
//!    only child as the next top. Last the leaf itself leaves the leaf
//!    level (both its siblings' links). A leftmost page's right sibling
//!    becomes its level's leftmost (flag and metapage) as it goes, so a
//!    range emptied from the start shrinks the tree too. Once no snapshot
//!    is older, VACUUM gives the pages to the free space map (`recycle`)
//!    and writers reuse them.
//!
//! A crash between records leaves a half-dead leaf, whose deletion the
//! next VACUUM finishes from its top. Each record stays within
//! GenericXLog's four pages. A parent's last child (with other children
//! left of it) stays, as in nbtree: its key range has no sibling under the
//! same parent to go to. Empty NULL pages leave their chain in one record
//! (`delete_empty_null_page`) and are recycled the same way.
//! Locks follow the writers' order (left to right on a level, child
//! before parent); parents are found by descents while the pages below
//! are held, as a split finds them. While unlinking, the half-dead leaf is
//! held first, as nbtree does: no writer locks a dead leaf and then a
//! page above it.

use super::page::Exclusive;
use super::page::*;
use super::tree::{Locked, Tree};
use crate::storage::{recycle, Xlog};

/// Deletes the empty leaf `leaf` (exclusively locked, not dead) and the
/// parents it is the only descendant of, if they may go; returns how many
/// pages it deleted.
pub fn delete_empty_leaf(tree: &Tree, leaf: Exclusive) -> u32 {
    let block = leaf.block();
    if !mark_half_dead(tree, leaf) {
        return 0;
    }
    // SAFETY: VACUUM's cost-delay point, with no lock held.
    unsafe { pgrx::pg_sys::vacuum_delay_point() };
    if crate::guc::DEBUG_INTERRUPT_PAGE_DELETION.get() {
        return 0;
    }
    unlink(tree, block)
}

/// Stage 1. False (nothing changed) where the leaf must stay: not empty,
/// the rightmost, its subtree its parent's last child or reaching the
/// root, or beside a dead page or a split a crash left without its
/// downlink.
fn mark_half_dead(tree: &Tree, leaf: Exclusive) -> bool {
    let s = leaf.page().special();
    if s.count != 0 || is_dead(&s) || s.flags & (RIGHTMOST | INCOMPLETE_SPLIT) != 0 {
        return false;
    }
    let right = Exclusive::lock(tree.rel, s.right);
    if is_dead(&right.page().special()) {
        return false;
    }
    // Up from the leaf while the parent has no other child: those parents
    // (`only`, bottom up) go with it. A parent's entry for a child is
    // keyed by the child's high key.
    let mut only: Vec<Exclusive> = Vec::new();
    let (parent, j) = loop {
        let (child, high, level) = match only.last() {
            Some(p) => (p.block(), p.page().special().high, p.page().special().level as u32),
            None => (leaf.block(), s.high, 0),
        };
        let Locked::X(start) = tree.descend(high, level + 1, true, &mut Vec::new()) else { unreachable!("exclusive descent") };
        let Some((parent, j)) = tree.find_parent(start, child) else { return false };
        let p = Inner::new(parent.page());
        if p.count() > 1 {
            break (parent, j);
        }
        // Never the root, nor a level's rightmost page, nor one with a
        // split to finish (its right page would lose its range).
        if p.s.flags & (RIGHTMOST | INCOMPLETE_SPLIT) != 0 {
            return false;
        }
        only.push(parent);
    };
    // The subtree's right sibling on the top's level must be the next
    // child of the same parent: it takes the range.
    let top_right = only.last().map_or(right.block(), |t| t.page().special().right);
    let (keys, children) = {
        let p = Inner::new(parent.page());
        if j + 1 >= p.count() || p.child(j + 1) != top_right {
            return false;
        }
        let (mut keys, mut children) = (p.keys().to_vec(), (0..p.count()).map(|i| p.child(i)).collect::<Vec<_>>());
        keys.remove(j);
        children.remove(j);
        (keys, children)
    };
    let top = only.last().map(|t| t.block());
    let meta = Exclusive::lock(tree.rel, META_BLOCK);
    let x = Xlog::start(tree.rel);
    inner_set(&mut x.register(&parent, false), &keys, &children);
    x.register(&leaf, false).update_special(|t| {
        t.flags |= HALF_DEAD;
        set_top(t, top);
    });
    x.register(&right, false).update_special(|t| t.low = s.low);
    let mut mp = x.register(&meta, false);
    let mut m = read_meta(mp.as_ref());
    m.deleted_pages += 1 + only.len() as u32;
    write_meta(&mut mp, &m);
    x.finish();
    true
}

/// Stage 2 for the half-dead leaf `block`: unlinks its subtree's pages top
/// down, then the leaf. Returns how many pages it deleted.
pub fn unlink(tree: &Tree, block: u32) -> u32 {
    let mut deleted = 0;
    loop {
        let leaf = Exclusive::lock(tree.rel, block);
        let s = leaf.page().special();
        if s.flags & HALF_DEAD == 0 {
            corrupted(format!("leaf {block} is not half-dead"));
        }
        deleted += 1;
        match top_of(&s) {
            Some(top) => unlink_inner(tree, &leaf, top),
            None => {
                drop(leaf);
                unlink_leaf(tree, block);
                return deleted;
            }
        }
        drop(leaf);
        // SAFETY: VACUUM's cost-delay point, with no lock held.
        unsafe { pgrx::pg_sys::vacuum_delay_point() };
    }
}

/// Unlinks `top`, an inner page of the subtree of the half-dead `leaf`
/// (locked) with one child left, from its level; the same record has the
/// leaf name the next top (the child).
fn unlink_inner(tree: &Tree, leaf: &Exclusive, top: u32) {
    let leftmost = Shared::lock(tree.rel, top).page().special().flags & LEFTMOST != 0;
    let left = (!leftmost).then(|| left_of_inner(tree, top));
    let target = Exclusive::lock(tree.rel, top);
    let (low, next) = {
        let p = Inner::new(target.page());
        if p.count() != 1 || is_dead(&p.s) || (p.s.flags & LEFTMOST != 0) != leftmost {
            corrupted(format!("inner page {top} of a deleted subtree changed (entries {}, flags {:#x})", p.count(), p.s.flags));
        }
        (p.s.low, (p.s.level > 1).then(|| p.child(0)))
    };
    unlink_record(tree, left.as_ref(), &target, |t| t.low = low, |x| x.register(leaf, false).update_special(|t| set_top(t, next)));
}

/// The live page linking to the inner page `top` on its level, locked
/// (inner pages keep no left links): walking right from where a descent
/// to `top`'s low fence lands, or, where no descent reaches that part of
/// the level (`top` lies under a subtree another deletion cut off before
/// a crash), from the level's leftmost page.
fn left_of_inner(tree: &Tree, top: u32) -> Exclusive {
    let s = Shared::lock(tree.rel, top).page().special();
    let Locked::X(start) = tree.descend(s.low, s.level as u32, true, &mut Vec::new()) else { unreachable!("exclusive descent") };
    walk_right_to(tree, start, top)
        .or_else(|| walk_right_to(tree, Exclusive::lock(tree.rel, tree.meta().leftmost[s.level as usize]), top))
        .unwrap_or_else(|| corrupted(format!("inner page {top} is not linked from the left")))
}

/// Walks right from `page` to the live page whose right link is `target`;
/// None at the level's end or at `target` itself.
fn walk_right_to(tree: &Tree, mut page: Exclusive, target: u32) -> Option<Exclusive> {
    loop {
        let s = page.page().special();
        if s.right == target && s.flags & DELETED == 0 {
            return Some(page);
        }
        if s.flags & RIGHTMOST != 0 || page.block() == target {
            return None;
        }
        drop(page);
        page = Exclusive::lock(tree.rel, s.right);
    }
}

/// Unlinks the half-dead leaf `block` (its subtree's last page): locks its
/// left sibling (walking right from its left link), itself and its right
/// sibling, in that order.
fn unlink_leaf(tree: &Tree, block: u32) {
    let left_link = Shared::lock(tree.rel, block).page().special().left;
    let left = (left_link != NONE).then(|| {
        walk_right_to(tree, Exclusive::lock(tree.rel, left_link), block)
            .unwrap_or_else(|| corrupted(format!("half-dead leaf {block} is not linked from the left")))
    });
    let target = Exclusive::lock(tree.rel, block);
    let ts = target.page().special();
    if ts.flags & HALF_DEAD == 0 || ts.left != left.as_ref().map_or(NONE, |l| l.block()) || (ts.flags & LEFTMOST != 0) != left.is_none() {
        corrupted(format!("leaf {block} changed while being unlinked (flags {:#x}, left {})", ts.flags, ts.left));
    }
    unlink_record(tree, left.as_ref(), &target, |t| t.left = ts.left, |_| {});
}

/// The record that takes the locked `target` off its level: its left
/// sibling's right link skips it, its right sibling (locked here) gets
/// `right_change`, and it is marked deleted at a safe xid (keeping its
/// own links for scans on their way to it). Without a left sibling it was
/// its level's leftmost page: the right sibling takes that role (flag and
/// metapage; scans start there, backward scans stop there). `also` adds
/// to the same record (at most four pages in all).
fn unlink_record(
    tree: &Tree,
    left: Option<&Exclusive>,
    target: &Exclusive,
    right_change: impl FnOnce(&mut Special),
    also: impl FnOnce(&Xlog),
) {
    let ts = target.page().special();
    let right = Exclusive::lock(tree.rel, ts.right);
    let meta = left.is_none().then(|| Exclusive::lock(tree.rel, META_BLOCK));
    let x = Xlog::start(tree.rel);
    if let Some(l) = left {
        x.register(l, false).update_special(|t| t.right = ts.right);
    }
    x.register(&right, false).update_special(|t| {
        right_change(t);
        t.flags |= ts.flags & LEFTMOST;
    });
    set_deleted(&mut x.register(target, false), recycle::safe_xid_now());
    also(&x);
    if let Some(meta) = &meta {
        let mut mp = x.register(meta, false);
        let mut m = read_meta(mp.as_ref());
        m.leftmost[ts.level as usize] = right.block();
        write_meta(&mut mp, &m);
    }
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

//! The B-link tree over pages (Lehman & Yao, as nbtree): descents move
//! right past pages split since their parent was read, a split keeps the
//! left half in place, and the parent learns of the new right page in a
//! second WAL record. Locks: readers hold one page at a time; writers lock
//! left to right within a level and child before parent, so no cycle can
//! form. A crash between the two records leaves a right page without a
//! downlink: searches still reach it through its left sibling's right link.
//! Empty leaves are deleted by VACUUM (`delete.rs`); a descent or scan
//! that lands on a half-dead or deleted leaf moves right, to the page that
//! took its key range.

use super::page::*;
use super::page::{Exclusive, Shared};
use crate::am::common::cache;
use crate::storage::{RecentPages, Xlog};
use gpuindex_engine::hbtree::line::lower_bound;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// A page of this tree locked either way.
pub type Locked = crate::storage::Locked<Special>;

/// The root and its level, cached per index: descents start there
/// without reading the metapage. A stale root is still a page of its level,
/// and one that has split is noticed (it lost RIGHTMOST).
struct Root {
    block: u32,
    level: u32,
}

impl cache::Image for Root {
    fn generation(&self) -> u64 {
        0
    }
    fn host_bytes(&self) -> usize {
        std::mem::size_of::<Root>()
    }
}

pub struct Tree {
    pub rel: pg_sys::Relation,
    /// Where every descent starts, once set (`pinned`).
    pin: std::cell::Cell<Option<(u32, u32)>>,
    pinning: bool,
}

impl Tree {
    pub fn new(rel: pg_sys::Relation) -> Tree {
        Tree { rel, pin: std::cell::Cell::new(None), pinning: false }
    }

    /// A scan's tree: every descent starts from `pin`, or (None) from the
    /// root the first descent finds, kept (`pin`). By the B-link rules a
    /// root that has split since still leads to every page; and the scans
    /// of a gpu_learned delta stay on the tree of the generation they
    /// started on, which a merge replaces but leaves intact.
    pub fn pinned(rel: pg_sys::Relation, pin: Option<(u32, u32)>) -> Tree {
        Tree { rel, pin: std::cell::Cell::new(pin), pinning: true }
    }

    /// The root a pinned tree's descents start from, once one has.
    pub fn pin(&self) -> Option<(u32, u32)> {
        self.pin.get()
    }

    /// Leaf entries kept when a rightmost leaf splits at its end (append
    /// workloads): the fillfactor, as nbtree does.
    fn fill_leaf(&self) -> usize {
        LEAF_CAPACITY * super::options::fillfactor(self.rel) / 100
    }

    pub fn meta(&self) -> Meta {
        read_meta(Shared::lock(self.rel, META_BLOCK).page())
    }

    /// The first page at `level` whose high key is >= q (every key < q of
    /// that level lies to its left), locked shared or exclusive. `path`
    /// receives the inner pages passed, top down.
    /// The root and its level: cached, or from the metapage.
    fn root(&self, fresh: bool) -> (u32, u32) {
        if !fresh {
            if let Some(r) = cache::lookup::<Root>(self.rel, "root") {
                return (r.block, r.level);
            }
        }
        let m = self.meta();
        cache::store(self.rel, "root", Root { block: m.root, level: m.root_level });
        (m.root, m.root_level)
    }

    pub(super) fn descend(&self, q: u64, level: u32, exclusive: bool, path: &mut Vec<u32>) -> Locked {
        let pinned = self.pin.get();
        let (mut block, mut at) = pinned.unwrap_or_else(|| self.root(false));
        if at < level {
            (block, at) = self.root(true);
            if at < level {
                corrupted(format!("level {level} asked for, the root is at level {at}"));
            }
        }
        let mut first = pinned.is_none();
        // Shared locks pin through the buffers remembered (no buffer-mapping
        // lookup for a page read before).
        let mut recent = RecentPages::of(self.rel);
        loop {
            let locked = if exclusive && at == level { Locked::lock(self.rel, block, true) } else { Locked::S(recent.lock_shared(block)) };
            if std::mem::take(&mut first) {
                let flags = locked.page().special().flags;
                if flags & (LEFTMOST | RIGHTMOST) != LEFTMOST | RIGHTMOST || flags & RETIRED != 0 {
                    // The cached root has split, or a gpu_learned merge
                    // replaced the tree (retiring its root in the same
                    // record): start again from the metapage's.
                    let (fresh, fresh_level) = self.root(true);
                    if fresh != block {
                        drop(locked);
                        (block, at) = (fresh, fresh_level);
                        path.clear();
                        first = true;
                        continue;
                    }
                }
                if self.pinning {
                    self.pin.set(Some((block, at)));
                }
            }
            let page = self.move_right(locked, q);
            if at == level {
                if let Locked::X(g) = page {
                    let s = g.page().special();
                    if s.flags & INCOMPLETE_SPLIT == 0 {
                        return Locked::X(g);
                    }
                    // Finish it, then descend again: the split's right
                    // half may be where q goes.
                    self.insert_downlink(Vec::new(), level, g, s.high, s.right);
                    (block, at) = self.root(true);
                    path.clear();
                    first = true;
                    continue;
                }
                return page;
            }
            let inner = Inner::new(page.page());
            let j = lower_bound(inner.keys(), q);
            if j >= inner.count() {
                corrupted(format!("inner page {} has no child for key {q}", page.block()));
            }
            path.push(page.block());
            block = inner.child(j);
            at -= 1;
        }
    }

    /// Moves right while q is above the page's high key or the page is dead;
    /// a writer stops at a page with an incomplete split (to finish it).
    fn move_right(&self, mut page: Locked, q: u64) -> Locked {
        loop {
            let s = page.page().special();
            let finish = s.flags & INCOMPLETE_SPLIT != 0 && matches!(page, Locked::X(_));
            if finish || (!is_dead(&s) && (s.flags & RIGHTMOST != 0 || q <= s.high)) {
                return page;
            }
            let exclusive = matches!(page, Locked::X(_));
            drop(page);
            page = Locked::lock(self.rel, s.right, exclusive);
        }
    }

    /// The leaf where the lower bound of q lies (share-locked).
    pub fn find_leaf(&self, q: u64) -> Shared {
        match self.descend(q, 0, false, &mut Vec::new()) {
            Locked::S(g) => g,
            Locked::X(_) => unreachable!("shared descent"),
        }
    }

    /// The last leaf that may hold keys <= q (start of a backward scan).
    pub fn find_last_leaf(&self, q: u64) -> Shared {
        let mut g = self.find_leaf(q);
        loop {
            let s = g.page().special();
            if !is_dead(&s) && (s.flags & RIGHTMOST != 0 || s.high != q) {
                return g;
            }
            drop(g);
            g = Shared::lock(self.rel, s.right);
        }
    }

    /// The leaf left of `block`, whose left link was `left` when read
    /// (nbtree's _bt_walk_left): walks right from `left` to the live page
    /// linking to `block` (pages split off `left` since lie between). If
    /// none does, either `block` was deleted since (then start over from
    /// the first live page right of it, which took its key range) or its
    /// left sibling was (then its left link has changed: follow the new
    /// one). May return a half-dead page (empty: the scan steps on left).
    /// None where nothing is left of `block` any more (the pages left of
    /// it were deleted: it is the leftmost leaf now).
    pub fn leaf_left_of(&self, mut block: u32, mut left: u32) -> Option<Shared> {
        loop {
            if left == NONE {
                return None;
            }
            let mut g = Shared::lock(self.rel, left);
            loop {
                let s = g.page().special();
                if s.flags & DELETED == 0 && s.right == block {
                    return Some(g);
                }
                if s.flags & RIGHTMOST != 0 {
                    break;
                }
                drop(g);
                g = Shared::lock(self.rel, s.right);
            }
            drop(g);
            let mut g = Shared::lock(self.rel, block);
            if g.page().special().flags & DELETED != 0 {
                while g.page().special().flags & DELETED != 0 {
                    let next = g.page().special().right;
                    drop(g);
                    g = Shared::lock(self.rel, next);
                }
                block = g.block();
            } else if g.page().special().left == left {
                corrupted(format!("the left sibling of leaf {block} links elsewhere"));
            }
            left = g.page().special().left;
        }
    }

    /// Every (high key, child) entry of `level`, left to right.
    pub fn level_entries(&self, m: &Meta, level: u32) -> (Vec<u64>, Vec<u32>) {
        let (mut keys, mut children) = (Vec::new(), Vec::new());
        let mut block = m.leftmost[level as usize];
        while block != NONE {
            let g = Shared::lock(self.rel, block);
            let inner = Inner::new(g.page());
            keys.extend_from_slice(inner.keys());
            children.extend((0..inner.count()).map(|i| inner.child(i)));
            block = if inner.rightmost() { NONE } else { inner.s.right };
        }
        (keys, children)
    }

    /// Inserts one entry.
    pub fn insert(&self, key: u64, tid: Tid) {
        let mut path = Vec::new();
        let Locked::X(mut leaf) = self.descend(key, 0, true, &mut path) else { unreachable!("exclusive descent") };
        let (room, pos) = {
            let l = Leaf::new(leaf.page());
            (l.has_room(key), l.upper_bound(key))
        };
        if room {
            if crate::storage::rmgr::available() {
                super::wal::leaf_insert_logged(self.rel, &mut leaf, pos, key, tid);
            } else {
                let x = Xlog::start(self.rel);
                leaf_insert(&mut x.register(&leaf, false), pos, key, tid);
                x.finish();
            }
            return;
        }
        self.rewrite_leaf(leaf, pos, key, tid, path);
    }

    /// Inserts into a leaf without room for the key as it is: rewritten in
    /// place where the entries fit one leaf of either format (a plain leaf
    /// whose keys became one, a run leaf taking another key), else split.
    fn rewrite_leaf(&self, leaf: Exclusive, pos: usize, key: u64, tid: Tid, path: Vec<u32>) {
        let (mut keys, mut tids, s) = {
            let l = Leaf::new(leaf.page());
            let (keys, tids) = l.keys_and_tids();
            (keys, tids, l.s)
        };
        keys.insert(pos, key);
        tids.insert(pos, tid);
        if fits_leaf(&keys) {
            let x = Xlog::start(self.rel);
            leaf_set(&mut x.register(&leaf, false), &keys, &tids);
            x.finish();
            return;
        }
        let split = self.leaf_split_point(&keys, pos, s.flags & RIGHTMOST != 0);
        self.split_leaf(leaf, keys, tids, split, s, path);
    }

    /// Where a leaf's entries (the new one at `pos`) split, both halves
    /// fitting a leaf. Later copies of a key land on the first page of
    /// its run, so a run leaf that overflows keeps the fillfactor's share
    /// on the right and the room on the left. Appending to the rightmost
    /// leaf keeps the fillfactor's share on the left (nbtree's way). A long
    /// run of the new key (half a plain leaf or more) goes to a page of its
    /// own, which becomes a run leaf. Otherwise the middle.
    fn leaf_split_point(&self, keys: &[u64], pos: usize, rightmost: bool) -> usize {
        let n = keys.len();
        let q = keys[pos];
        let (start, end) = (keys.partition_point(|&k| k < q), keys.partition_point(|&k| k <= q));
        let fits = |s: usize| s > 0 && s < n && fits_leaf(&keys[..s]) && fits_leaf(&keys[s..]);
        let preferred = if start == 0 && end == n {
            n.saturating_sub(RUN_LEAF_CAPACITY * super::options::fillfactor(self.rel) / 100)
        } else if rightmost && pos + 1 == n {
            self.fill_leaf()
        } else if end - start >= LEAF_CAPACITY / 2 {
            // The run's page on its own: split at its start, unless that
            // leaves nothing on the left (then at its end).
            if start > 0 {
                start
            } else {
                end
            }
        } else {
            n / 2
        };
        if fits(preferred) {
            return preferred;
        }
        // Outward from the middle: a plain leaf plus one fits at its
        // middle; a run leaf plus another key at the run's boundary.
        (0..n).flat_map(|d| [n / 2 + d, n / 2 - d.min(n / 2)]).find(|&s| fits(s)).expect("a split point where both halves fit")
    }

    /// Splits a leaf at `split` of its entries (the new one among them):
    /// one record changes the leaf, the new right page, the old right
    /// neighbour's left link and the metapage's generation (4 pages,
    /// GenericXLog's limit).
    fn split_leaf(&self, leaf: Exclusive, keys: Vec<u64>, tids: Vec<Tid>, split: usize, s: Special, path: Vec<u32>) {
        let sep = keys[split - 1];
        let right = new_page(self.rel);
        let neighbour = (s.flags & RIGHTMOST == 0).then(|| Exclusive::lock(self.rel, s.right));
        let meta = Exclusive::lock(self.rel, META_BLOCK);
        let x = Xlog::start(self.rel);
        {
            let mut rp = x.register(&right, true);
            let mut rs = special(KIND_LEAF, 0, s.flags & RIGHTMOST, sep, s.high);
            rs.left = leaf.block();
            rs.right = s.right;
            rp.init(rs);
            leaf_set(&mut rp, &keys[split..], &tids[split..]);
            let mut lp = x.register(&leaf, false);
            lp.update_special(|t| {
                t.flags = (t.flags & !RIGHTMOST) | INCOMPLETE_SPLIT;
                t.high = sep;
                t.right = right.block();
            });
            leaf_set(&mut lp, &keys[..split], &tids[..split]);
            if let Some(n) = &neighbour {
                x.register(n, false).update_special(|t| t.left = right.block());
            }
            let mut mp = x.register(&meta, false);
            let mut m = read_meta(mp.as_ref());
            m.generation += 1;
            write_meta(&mut mp, &m);
        }
        x.finish();
        let right_block = right.block();
        drop(meta);
        drop(neighbour);
        drop(right);
        if crate::guc::DEBUG_INTERRUPT_SPLITS.get() {
            return;
        }
        self.insert_downlink(path, 0, leaf, sep, right_block);
    }

    /// After `child` (still locked) split at `sep` into itself and
    /// `right`, records the split one level up: the parent's entry
    /// (B, child) becomes (sep, child), (B, right); the same record clears
    /// the child's INCOMPLETE_SPLIT.
    fn insert_downlink(&self, mut path: Vec<u32>, level: u32, child: Exclusive, sep: u64, right: u32) {
        let parent = match path.pop() {
            Some(hint) => self.find_parent(Exclusive::lock(self.rel, hint), child.block()),
            None => {
                let meta = Exclusive::lock(self.rel, META_BLOCK);
                let m = read_meta(meta.page());
                if m.root == child.block() {
                    self.new_root(meta, m, level + 1, &child, sep, right);
                    return;
                }
                drop(meta);
                let Locked::X(p) = self.descend(sep, level + 1, true, &mut path) else { unreachable!() };
                self.find_parent(p, child.block())
            }
        };
        let Some((parent, j)) = parent else {
            // The child's own downlink is missing (a split interrupted by a
            // crash): its right page stays reachable by right links only.
            debug1!("gpu_btree: no downlink for block {} in \"{}\"", child.block(), self.name());
            return;
        };
        let (mut keys, mut children, s) = {
            let p = Inner::new(parent.page());
            (p.keys().to_vec(), (0..p.count()).map(|i| p.child(i)).collect::<Vec<_>>(), p.s)
        };
        let bound = keys[j];
        keys[j] = sep;
        keys.insert(j + 1, bound);
        children.insert(j + 1, right);
        let completed = |x: &Xlog| x.register(&child, false).update_special(|t| t.flags &= !INCOMPLETE_SPLIT);
        if keys.len() <= INNER_CAPACITY {
            let x = Xlog::start(self.rel);
            inner_set(&mut x.register(&parent, false), &keys, &children);
            completed(&x);
            x.finish();
            return;
        }
        let appending = s.flags & RIGHTMOST != 0 && j + 2 == keys.len();
        let split = if appending { INNER_CAPACITY * 9 / 10 } else { keys.len() / 2 };
        let new = new_page(self.rel);
        let x = Xlog::start(self.rel);
        {
            let mut np = x.register(&new, true);
            let mut ns = special(KIND_INNER, s.level, s.flags & RIGHTMOST, keys[split - 1], s.high);
            ns.left = parent.block();
            ns.right = s.right;
            np.init(ns);
            inner_set(&mut np, &keys[split..], &children[split..]);
            let mut pp = x.register(&parent, false);
            pp.update_special(|t| {
                t.flags = (t.flags & !RIGHTMOST) | INCOMPLETE_SPLIT;
                t.high = keys[split - 1];
                t.right = new.block();
            });
            inner_set(&mut pp, &keys[..split], &children[..split]);
            completed(&x);
        }
        x.finish();
        let new_block = new.block();
        drop(new);
        drop(child);
        self.insert_downlink(path, level + 1, parent, keys[split - 1], new_block);
    }

    /// Moves right from `page` to the page holding the downlink to `child`.
    pub(super) fn find_parent(&self, mut page: Exclusive, child: u32) -> Option<(Exclusive, usize)> {
        loop {
            let p = Inner::new(page.page());
            if let Some(j) = (0..p.count()).find(|&j| p.child(j) == child) {
                return Some((page, j));
            }
            if p.rightmost() {
                return None;
            }
            let next = p.s.right;
            drop(page);
            page = Exclusive::lock(self.rel, next);
        }
    }

    fn new_root(&self, meta: Exclusive, mut m: Meta, level: u32, child: &Exclusive, sep: u64, right: u32) {
        let left = child.block();
        if level as usize >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let root = new_page(self.rel);
        let x = Xlog::start(self.rel);
        {
            let mut rp = x.register(&root, true);
            rp.init(special(KIND_INNER, level as u8, LEFTMOST | RIGHTMOST, 0, u64::MAX));
            inner_set(&mut rp, &[sep, u64::MAX], &[left, right]);
            m.root = root.block();
            m.root_level = level;
            m.leftmost[level as usize] = root.block();
            write_meta(&mut x.register(&meta, false), &m);
            x.register(child, false).update_special(|t| t.flags &= !INCOMPLETE_SPLIT);
        }
        x.finish();
    }

    /// Appends the TID of a NULL key to the NULL chain (serialised by the
    /// metapage lock).
    pub fn insert_null(&self, tid: Tid) {
        let meta = Exclusive::lock(self.rel, META_BLOCK);
        let mut m = read_meta(meta.page());
        let tail = (m.null_tail != NONE).then(|| Exclusive::lock(self.rel, m.null_tail));
        if let Some(t) = &tail {
            let n = Nulls::new(t.page());
            if n.count() < NULLS_CAPACITY {
                let mut tids: Vec<Tid> = (0..n.count()).map(|i| n.tid(i)).collect();
                tids.push(tid);
                let x = Xlog::start(self.rel);
                nulls_set(&mut x.register(t, false), &tids);
                x.finish();
                return;
            }
        }
        let new = new_page(self.rel);
        let x = Xlog::start(self.rel);
        {
            let mut np = x.register(&new, true);
            np.init(special(KIND_NULLS, 0, 0, 0, 0));
            nulls_set(&mut np, &[tid]);
            if let Some(t) = &tail {
                x.register(t, false).update_special(|s| s.right = new.block());
            } else {
                m.null_head = new.block();
            }
            m.null_tail = new.block();
            write_meta(&mut x.register(&meta, false), &m);
        }
        x.finish();
    }

    fn name(&self) -> String {
        // SAFETY: rd_rel is valid for an open relation.
        unsafe { pgrx::name_data_to_str(&(*(*self.rel).rd_rel).relname).to_string() }
    }
}

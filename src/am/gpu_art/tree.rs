//! gpu_art's B-link tree: gpu_btree's protocol (Lehman & Yao, as
//! nbtree) over variable-length keys. Descents move right past pages
//! split since their parent was read; a split keeps the left half in
//! place and gives the parent its downlink in a second WAL record (a
//! crash between them leaves the right page reachable through its left
//! sibling, and the next writer there finishes the split). Readers hold
//! one page at a time; writers lock left to right within a level, child
//! before parent, the metapage last.

use super::inner_copies::InnerCopies;
use super::long;
use super::page::*;
use crate::am::common::cache;
use crate::storage::{RecentPages, Xlog};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// A page of this tree locked either way.
pub type Locked = crate::storage::Locked<Special>;

/// The root and its level, cached per index: descents start there
/// without reading the metapage. A root that has split since is noticed
/// (it lost RIGHTMOST) and the metapage read again.
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

/// A page's entries as stored, copied out of it (moved to other pages
/// as they are: a long entry keeps its chain).
type Entries = Vec<(OwnedStored, u64)>;

fn copy_entries(n: &Node) -> Entries {
    (0..n.count()).map(|i| (n.stored(i).to_owned(), n.entry(i).1)).collect()
}

fn borrowed(entries: &[(OwnedStored, u64)]) -> Vec<(Stored<'_>, u64)> {
    entries.iter().map(|(k, p)| (k.stored(), *p)).collect()
}

fn sizes(entries: &[(OwnedStored, u64)]) -> Vec<usize> {
    entries.iter().map(|(k, _)| entry_size(k.bytes.len())).collect()
}

pub struct Tree {
    pub rel: pg_sys::Relation,
}

impl Tree {
    pub fn new(rel: pg_sys::Relation) -> Tree {
        Tree { rel }
    }

    pub fn meta(&self) -> Meta {
        read_meta(Shared::lock(self.rel, META_BLOCK).page())
    }

    /// The root and its level: cached per backend, or from the metapage.
    fn root(&self, fresh: bool) -> (u32, u32) {
        if !fresh {
            if let Some(r) = cache::lookup::<Root>(self.rel, "art root") {
                return (r.block, r.level);
            }
        }
        let m = self.meta();
        cache::store(self.rel, "art root", Root { block: m.root, level: m.root_level });
        (m.root, m.root_level)
    }

    /// The first page at `level` whose high key is >= q (every key < q of
    /// that level lies to its left), locked shared or exclusive; `last`:
    /// the last one whose high key is q, where an insert of q appends to
    /// the run of its equals (as its parent saw it: a page split off since
    /// is as good a place). `path` receives the inner pages passed, top
    /// down. Lookups descend with `find_leaf`.
    fn descend(&self, q: Key, level: u32, exclusive: bool, last: bool, path: &mut Vec<u32>) -> Locked {
        let (mut block, mut at) = self.root(false);
        if at < level {
            (block, at) = self.root(true);
            if at < level {
                corrupted(format!("level {level} asked for, the root is at level {at}"));
            }
        }
        let mut first = true;
        loop {
            let locked = Locked::lock(self.rel, block, exclusive && at == level);
            if let Some(fresh) = std::mem::take(&mut first).then(|| self.newer_root(block, locked.page())).flatten() {
                drop(locked);
                (block, at) = fresh;
                path.clear();
                first = true;
                continue;
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
                    let sep = Node::new(g.page()).high().to_owned();
                    self.insert_downlink(Vec::new(), level, g, sep, s.right);
                    (block, at) = self.root(true);
                    path.clear();
                    first = true;
                    continue;
                }
                return page;
            }
            let node = Node::new(page.page());
            let mut j = node.search(self.rel, q, last);
            if last && j > 0 && long::compare(self.rel, node.stored(j - 1), q).is_eq() {
                j -= 1;
            }
            path.push(page.block());
            block = self.child(&node, j, page.block());
            at -= 1;
        }
    }

    /// The leaf where the first key >= q lies, if any (share-locked): a
    /// reader's descent, most of a single lookup, kept apart from the
    /// writers' (`descend`) and small. Inner pages are searched in this
    /// backend's copies where it holds one, and copied when read; pages
    /// are pinned through the buffers they were last found in (a lookup's
    /// buffer-mapping lookup of its leaf was 8% of its time).
    pub fn find_leaf(&self, q: Key) -> Shared {
        let copies = InnerCopies::of(self.rel);
        let mut recent = RecentPages::of(self.rel);
        let (mut block, mut at) = self.root(false);
        let mut first = true;
        // The copy `block` came from.
        let mut via: Option<u32> = None;
        loop {
            if at > 0 {
                if let Some(child) = copies.child(block, at, q) {
                    (via, first) = (Some(block), false);
                    (block, at) = (child, at - 1);
                    continue;
                }
            }
            let page: Shared = recent.lock_shared(block);
            if let Some(fresh) = std::mem::take(&mut first).then(|| self.newer_root(block, page.page())).flatten() {
                drop(page);
                (block, at) = fresh;
                first = true;
                continue;
            }
            let (page, moved) = self.move_right_counted(Locked::S(page), q);
            let Locked::S(page) = page else { unreachable!("shared descent") };
            if let (Some(v), true) = (via.take(), moved) {
                copies.forget(v);
            }
            if at == 0 {
                return page;
            }
            let node = Node::new(page.page());
            block = self.child(&node, node.search(self.rel, q, false), page.block());
            at -= 1;
            copies.remember(page.block(), page.page());
        }
    }

    /// The root and its level to start at instead of the cached root
    /// `block` (`page`, locked), if that has split since (it is no longer
    /// the only page of its level: a new root is above it, and though it
    /// would still lead everywhere, a descent starts at the top).
    fn newer_root(&self, block: u32, page: PageRef) -> Option<(u32, u32)> {
        if page.special().flags & (LEFTMOST | RIGHTMOST) == LEFTMOST | RIGHTMOST {
            return None;
        }
        let fresh = self.root(true);
        (fresh.0 != block).then_some(fresh)
    }

    /// The child of inner page `block` (`node`) at entry `j`.
    fn child(&self, node: &Node, j: usize, block: u32) -> u32 {
        if j >= node.count() {
            corrupted(format!("inner page {block} has no child for a key"));
        }
        node.entry(j).1 as u32
    }

    /// Moves right while q is above the page's high key; a writer stops at
    /// a page with an incomplete split (to finish it).
    fn move_right(&self, page: Locked, q: Key) -> Locked {
        self.move_right_counted(page, q).0
    }

    /// `move_right`, and whether it moved.
    fn move_right_counted(&self, mut page: Locked, q: Key) -> (Locked, bool) {
        let mut moved = false;
        loop {
            let n = Node::new(page.page());
            let exclusive = matches!(page, Locked::X(_));
            if (exclusive && n.s.flags & INCOMPLETE_SPLIT != 0) || n.rightmost() || long::compare(self.rel, n.high(), q).is_ge() {
                return (page, moved);
            }
            let right = n.s.right;
            drop(page);
            page = Locked::lock(self.rel, right, exclusive);
            moved = true;
        }
    }

    /// From a leaf at or left of the one a descent for q finds (a mirror
    /// hint), that leaf.
    pub fn move_right_from(&self, g: Shared, q: Key) -> Shared {
        match self.move_right(Locked::S(g), q) {
            Locked::S(g) => g,
            Locked::X(_) => unreachable!("shared walk"),
        }
    }

    /// The first page of `level` (share-locked).
    pub fn leftmost(&self, level: u32) -> Shared {
        match self.descend(Key::MIN, level, false, false, &mut Vec::new()) {
            Locked::S(g) => g,
            Locked::X(_) => unreachable!("shared descent"),
        }
    }

    /// The last leaf that may hold keys <= q (a backward scan's start).
    pub fn find_last_leaf(&self, q: Key) -> Shared {
        let mut g = self.find_leaf(q);
        loop {
            let n = Node::new(g.page());
            if n.rightmost() || long::compare(self.rel, n.high(), q).is_ne() {
                return g;
            }
            let right = n.s.right;
            drop(g);
            g = Shared::lock(self.rel, right);
        }
    }

    /// The leaf left of `block`, whose left link was `left` when read
    /// (nbtree's _bt_walk_left): walks right from `left` to the page
    /// linking to `block` (pages split off `left` since lie between).
    pub fn leaf_left_of(&self, block: u32, left: u32) -> Shared {
        let mut g = Shared::lock(self.rel, left);
        loop {
            let s = g.page().special();
            if s.right == block {
                return g;
            }
            if s.flags & RIGHTMOST != 0 {
                corrupted(format!("no leaf links to leaf {block} from its left sibling {left}"));
            }
            drop(g);
            g = Shared::lock(self.rel, s.right);
        }
    }

    /// Inserts one entry (NULL keys too: they sort after every value); a
    /// key over MAX_KEY bytes has its chain written first.
    pub fn insert(&self, key: Key, tid: Tid) {
        let long = (key.bytes.len() > MAX_KEY).then(|| long::store(self.rel, key.bytes, None));
        let stored = long.as_ref().map_or(Stored::whole(key), |l| l.stored());
        let mut path = Vec::new();
        let Locked::X(leaf) = self.descend(key, 0, true, true, &mut path) else { unreachable!("exclusive descent") };
        let (pos, fits) = {
            let n = Node::new(leaf.page());
            (n.search(self.rel, key, true), n.free() >= n.entry_bytes(stored))
        };
        if fits {
            let x = Xlog::start(self.rel);
            insert_entry(&mut x.register(&leaf, false), pos, stored, tid);
            x.finish();
            return;
        }
        self.split_leaf(leaf, pos, stored, tid, path);
    }

    /// Splits a full leaf while inserting: one record changes the leaf, the
    /// new right page, the old right neighbour's left link and the
    /// metapage's generation (4 pages, GenericXLog's limit). The left
    /// half's last key becomes its high key and the separator (a long one
    /// with a chain of its own, written before).
    fn split_leaf(&self, leaf: Exclusive, pos: usize, key: Stored, tid: Tid, path: Vec<u32>) {
        let (mut entries, s, high, low, prefix) = {
            let n = Node::new(leaf.page());
            (copy_entries(&n), n.s, (!n.rightmost()).then(|| n.high().to_owned()), n.low().map(<[u8]>::to_vec), n.prefix().len())
        };
        entries.insert(pos, (key.to_owned(), tid));
        // Sizes under the page's prefix: both halves' prefixes are at
        // least as long (their fences lie between the page's). High keys
        // and low fences are stored whole.
        let sz: Vec<usize> = entries.iter().map(|(k, _)| entry_size_under(k.stored(), prefix)).collect();
        let whole = sizes(&entries);
        let fence = |k: &OwnedStored| k.low_fence().map_or(0, |l| entry_size(l.len()));
        // Inserts of a key go to the end of its run, on the last page whose
        // high key it is, so a run grows right: appending to the index
        // fills the left page to the fillfactor; a page of one key, to 96%
        // (nbtree's single-value strategy: the next inserts go right); a
        // run followed by other keys splits after the new entry (the run
        // stays left with its next inserts, the other keys go right).
        let appending = s.flags & RIGHTMOST != 0 && pos + 1 == entries.len();
        let extends_run = pos > 0 && entries[pos - 1].0 == entries[pos].0;
        let half = sz.iter().sum::<usize>() / 2;
        let target = if appending {
            CONTENT_BYTES * super::options::fillfactor(self.rel) / 100
        } else if extends_run && entries[0].0 == entries[pos].0 && pos + 1 == entries.len() {
            CONTENT_BYTES * 96 / 100
        } else if extends_run {
            half.max(sz[..=pos].iter().sum())
        } else {
            half
        };
        let left_low = low.as_ref().map_or(0, |l| entry_size(l.len()));
        let right_high = high.as_ref().map_or(0, |h| entry_size(h.bytes.len()));
        let m = split_point(&sz, |m| whole[m - 1] + left_low, |m| right_high + fence(&entries[m - 1].0), target);
        let sep = long::copy(self.rel, entries[m - 1].0.stored());
        let right = new_page(self.rel);
        let neighbour = (s.flags & RIGHTMOST == 0).then(|| Exclusive::lock(self.rel, s.right));
        let meta = Exclusive::lock(self.rel, META_BLOCK);
        let x = Xlog::start(self.rel);
        {
            let mut rp = x.register(&right, true);
            let mut rs = special(KIND_LEAF, 0, s.flags & RIGHTMOST);
            rs.left = leaf.block();
            rs.right = s.right;
            rp.init(rs);
            set_entries(&mut rp, &borrowed(&entries[m..]), high.as_ref().map(|h| h.stored()), sep.low_fence());
            let mut lp = x.register(&leaf, false);
            lp.update_special(|t| {
                t.flags = (t.flags & !RIGHTMOST) | INCOMPLETE_SPLIT;
                t.right = right.block();
            });
            set_entries(&mut lp, &borrowed(&entries[..m]), Some(sep.stored()), low.as_deref());
            if let Some(n) = &neighbour {
                x.register(n, false).update_special(|t| t.left = right.block());
            }
            let mut mp = x.register(&meta, false);
            let mut md = read_meta(mp.as_ref());
            md.generation += 1;
            write_meta(&mut mp, &md);
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
    fn insert_downlink(&self, mut path: Vec<u32>, level: u32, child: Exclusive, sep: OwnedStored, right: u32) {
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
                let q = long::resolve(self.rel, sep.stored());
                let Locked::X(p) = self.descend(q.key(), level + 1, true, false, &mut path) else { unreachable!() };
                self.find_parent(p, child.block())
            }
        };
        let Some((parent, j)) = parent else {
            // The child's own downlink is missing (a split interrupted by a
            // crash): its right page stays reachable by right links only.
            debug1!("gpu_art: no downlink for block {}", child.block());
            return;
        };
        let (mut entries, s) = {
            let n = Node::new(parent.page());
            (copy_entries(&n), n.s)
        };
        let bound = std::mem::replace(&mut entries[j].0, sep);
        entries.insert(j + 1, (bound, right as u64));
        let completed = |x: &Xlog| x.register(&child, false).update_special(|t| t.flags &= !INCOMPLETE_SPLIT);
        let sz = sizes(&entries);
        let total: usize = sz.iter().sum();
        if total <= CONTENT_BYTES {
            let x = Xlog::start(self.rel);
            set_entries(&mut x.register(&parent, false), &borrowed(&entries), None, None);
            completed(&x);
            x.finish();
            return;
        }
        let appending = s.flags & RIGHTMOST != 0 && j + 2 == entries.len();
        let m = split_point(&sz, |_| 0, |_| 0, if appending { CONTENT_BYTES * 9 / 10 } else { total / 2 });
        let new = new_page(self.rel);
        let x = Xlog::start(self.rel);
        {
            let mut np = x.register(&new, true);
            let mut ns = special(KIND_INNER, s.level, s.flags & RIGHTMOST);
            ns.left = parent.block();
            ns.right = s.right;
            np.init(ns);
            set_entries(&mut np, &borrowed(&entries[m..]), None, None);
            let mut pp = x.register(&parent, false);
            pp.update_special(|t| {
                t.flags = (t.flags & !RIGHTMOST) | INCOMPLETE_SPLIT;
                t.right = new.block();
            });
            set_entries(&mut pp, &borrowed(&entries[..m]), None, None);
            completed(&x);
        }
        x.finish();
        let new_block = new.block();
        drop(new);
        drop(child);
        let sep = entries.swap_remove(m - 1).0;
        self.insert_downlink(path, level + 1, parent, sep, new_block);
    }

    /// Moves right from `page` to the page holding the downlink to `child`.
    fn find_parent(&self, mut page: Exclusive, child: u32) -> Option<(Exclusive, usize)> {
        loop {
            let n = Node::new(page.page());
            if let Some(j) = (0..n.count()).find(|&j| n.entry(j).1 == child as u64) {
                return Some((page, j));
            }
            if n.rightmost() {
                return None;
            }
            let next = n.s.right;
            drop(page);
            page = Exclusive::lock(self.rel, next);
        }
    }

    fn new_root(&self, meta: Exclusive, mut m: Meta, level: u32, child: &Exclusive, sep: OwnedStored, right: u32) {
        if level >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let root = new_page(self.rel);
        let x = Xlog::start(self.rel);
        {
            let mut rp = x.register(&root, true);
            rp.init(special(KIND_INNER, level as u8, LEFTMOST | RIGHTMOST));
            set_entries(&mut rp, &[(sep.stored(), child.block() as u64), (Stored::INF, right as u64)], None, None);
            m.root = root.block();
            m.root_level = level;
            write_meta(&mut x.register(&meta, false), &m);
            x.register(child, false).update_special(|t| t.flags &= !INCOMPLETE_SPLIT);
        }
        x.finish();
    }
}

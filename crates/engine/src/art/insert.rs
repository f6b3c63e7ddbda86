//! Structural inserts on the host copy (the paper's CPU inserts): ART's
//! insert over the flat arrays (a leaf splits into an N4, a prefix splits
//! at its first differing byte, a full node grows into the next kind, the
//! grown-out record going to a free list for reuse), with every written
//! record noted so that `gpu::DeviceArt::refresh` copies only those (the
//! digest's partial buffer refresh). New leaves go at the arrays' ends, so
//! leaf order is key order only until the first insert (pitfall 5);
//! lookups and lower bounds do not depend on it.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The key is a prefix of a key in the tree, or has one as its prefix.
    Prefix,
    /// The value does not fit 55 bits.
    Value,
}

/// Where a link is stored: a root-table slot, or a child slot of a node
/// (the child's byte).
#[derive(Clone, Copy)]
enum Place {
    Root(usize),
    Child(u64, u8),
}

/// The records written since the last refresh, per array (`kind`;
/// 0: the root table), and whether the tail heap grew.
#[derive(Debug, Clone, Default)]
pub struct Dirty {
    pub records: [Vec<usize>; 9],
    pub tails_from: Option<usize>,
}

impl Dirty {
    pub(super) fn note(&mut self, link: u64) {
        self.records[kind(link) as usize].push(index(link));
    }

    pub fn is_empty(&self) -> bool {
        self.records.iter().all(Vec::is_empty) && self.tails_from.is_none()
    }
}

impl Art {
    /// Inserts `key` with `value` (a present key, deleted or not, gets the
    /// value). Returns whether the key is new. `key` must not be a prefix of
    /// a key in the tree or have one as its prefix (encode keys
    /// prefix-free).
    pub fn insert(&mut self, key: &[u8], value: u64) -> Result<bool, InsertError> {
        if value > VALUE_MASK {
            return Err(InsertError::Value);
        }
        let slot = lut_slot(key, self.lut_depth);
        let (mut place, mut link, mut d) = (Place::Root(slot), self.lut[slot], self.lut_depth);
        loop {
            if link == 0 {
                let leaf = self.new_leaf(key, value);
                self.set(place, leaf);
                self.n += 1;
                if let Place::Root(s) = place {
                    let at = self.slots.partition_point(|&x| (x as usize) < s);
                    self.slots.insert(at, s as u32);
                }
                return Ok(true);
            }
            if kind(link) >= LEAF8 {
                let (k, _) = self.leaf(link);
                if k == key {
                    let m = self.meta_mut(link);
                    *m = (*m & !(TOMBSTONE | VALUE_MASK)) | value;
                    self.dirty.note(link);
                    return Ok(false);
                }
                if k.starts_with(key) || key.starts_with(&k) {
                    return Err(InsertError::Prefix);
                }
                let j = d + k[d..].iter().zip(&key[d..]).take_while(|(a, b)| a == b).count();
                let leaf = self.new_leaf(key, value);
                let mut pair = [(k[j], link), (key[j], leaf)];
                pair.sort();
                let node = self.new_node(N4, &key[d..j], &pair);
                self.set(place, node);
                self.n += 1;
                return Ok(true);
            }
            // The node's full prefix (from a leaf below when longer than
            // the inline part).
            let h = *self.header(link);
            let p = h.prefix_len as usize;
            let below = if p > INLINE_PREFIX { self.leaf(self.edge_leaf(link)).0[d..d + p].to_vec() } else { h.prefix[..p].to_vec() };
            let prefix = &below[..];
            let same = prefix.iter().zip(key.get(d..).unwrap_or(&[])).take_while(|(a, b)| a == b).count();
            if same < p {
                if key.len() <= d + same {
                    return Err(InsertError::Prefix);
                }
                // Split the prefix: a new N4 over the node and the new leaf.
                let (split, rest) = (prefix[same], prefix[same + 1..].to_vec());
                let leaf = self.new_leaf(key, value);
                let mut pair = [(split, link), (key[d + same], leaf)];
                pair.sort();
                let node = self.new_node(N4, &key[d..d + same], &pair);
                self.set_prefix(link, &rest);
                self.set(place, node);
                self.n += 1;
                return Ok(true);
            }
            d += p;
            if key.len() <= d {
                return Err(InsertError::Prefix);
            }
            let b = key[d];
            let child = self.child(link, b);
            if child == 0 {
                let leaf = self.new_leaf(key, value);
                self.add_child(place, link, b, leaf);
                self.n += 1;
                return Ok(true);
            }
            (place, link, d) = (Place::Child(link, b), child, d + 1);
        }
    }

    fn set(&mut self, place: Place, link: u64) {
        match place {
            Place::Root(s) => {
                self.lut[s] = link;
                self.dirty.records[0].push(s);
            }
            Place::Child(node, b) => {
                let i = index(node);
                match kind(node) {
                    N4 => {
                        let n = &mut self.n4[i];
                        let j = n.keys[..n.h.count as usize].iter().position(|&k| k == b).expect("child byte");
                        n.child[j] = link;
                    }
                    N16 => {
                        let n = &mut self.n16[i];
                        let j = n.keys[..n.h.count as usize].iter().position(|&k| k == b).expect("child byte");
                        n.child[j] = link;
                    }
                    N48 => {
                        let n = &mut self.n48[i];
                        n.child[n.index[b as usize] as usize - 1] = link;
                    }
                    N256 => self.n256[i].child[b as usize] = link,
                    k => unreachable!("kind {k} has no children"),
                }
                self.dirty.note(node);
            }
        }
    }

    fn new_leaf(&mut self, key: &[u8], value: u64) -> u64 {
        let tails = self.tails.len();
        let leaf = build::push_leaf(self, key, value);
        if self.tails.len() > tails {
            self.dirty.tails_from.get_or_insert(tails);
        }
        self.dirty.note(leaf);
        leaf
    }

    /// A node of `kind` with `prefix` and `children` (byte order), in a
    /// free record when there is one.
    fn new_node(&mut self, kind: u8, prefix: &[u8], children: &[(u8, u64)]) -> u64 {
        let bytes: Vec<u8> = children.iter().map(|c| c.0).collect();
        let fresh = build::push_node(self, prefix, &bytes, kind);
        let node = match self.free[kind as usize].pop() {
            Some(i) => {
                self.move_record(fresh, i);
                link(kind, i)
            }
            None => fresh,
        };
        for (j, &(b, c)) in children.iter().enumerate() {
            build::set_child(self, node, b, j, c);
        }
        self.dirty.note(node);
        node
    }

    /// Moves the last record of `from`'s array (just pushed) to slot `to`.
    fn move_record(&mut self, from: u64, to: usize) {
        debug_assert_eq!(index(from) + 1, self.len_of(kind(from)));
        match kind(from) {
            N4 => self.n4[to] = self.n4.pop().expect("record"),
            N16 => self.n16[to] = self.n16.pop().expect("record"),
            N48 => self.n48[to] = self.n48.pop().expect("record"),
            N256 => self.n256[to] = self.n256.pop().expect("record"),
            k => unreachable!("kind {k} is not a node"),
        }
    }

    fn len_of(&self, kind: u8) -> usize {
        match kind {
            N4 => self.n4.len(),
            N16 => self.n16.len(),
            N48 => self.n48.len(),
            N256 => self.n256.len(),
            k => unreachable!("kind {k} is not a node"),
        }
    }

    fn header_mut(&mut self, link: u64) -> &mut Header {
        let i = index(link);
        match kind(link) {
            N4 => &mut self.n4[i].h,
            N16 => &mut self.n16[i].h,
            N48 => &mut self.n48[i].h,
            N256 => &mut self.n256[i].h,
            k => unreachable!("kind {k} has no header"),
        }
    }

    fn set_prefix(&mut self, link: u64, prefix: &[u8]) {
        let h = self.header_mut(link);
        h.prefix_len = prefix.len() as u32;
        h.prefix = [0; INLINE_PREFIX];
        let inline = prefix.len().min(INLINE_PREFIX);
        h.prefix[..inline].copy_from_slice(&prefix[..inline]);
        self.dirty.note(link);
    }

    /// Adds child `b` -> `child` to `node` (stored at `place`), growing it
    /// into the next kind when full.
    fn add_child(&mut self, place: Place, node: u64, b: u8, child: u64) {
        let count = self.header(node).count as usize;
        let i = index(node);
        let room = match kind(node) {
            N4 => count < 4,
            N16 => count < 16,
            N48 => count < 48,
            _ => true,
        };
        if !room {
            let mut children = self.children(node);
            let at = children.partition_point(|c| c.0 < b);
            children.insert(at, (b, child));
            let (h, next) = (*self.header(node), kind(node) + 1);
            // The header carries over whole (prefix length and inline
            // bytes), with the new count.
            let grown = self.new_node(next, &[], &children);
            *self.header_mut(grown) = Header { count: children.len() as u16, ..h };
            self.free[kind(node) as usize].push(i);
            self.set(place, grown);
            return;
        }
        match kind(node) {
            N4 | N16 => {
                let (keys, kids): (&mut [u8], &mut [u64]) = if kind(node) == N4 {
                    let n = &mut self.n4[i];
                    (&mut n.keys[..], &mut n.child[..])
                } else {
                    let n = &mut self.n16[i];
                    (&mut n.keys[..], &mut n.child[..])
                };
                let at = keys[..count].partition_point(|&k| k < b);
                keys.copy_within(at..count, at + 1);
                kids.copy_within(at..count, at + 1);
                keys[at] = b;
                kids[at] = child;
            }
            N48 => {
                let n = &mut self.n48[i];
                n.child[count] = child;
                n.index[b as usize] = count as u8 + 1;
            }
            _ => self.n256[i].child[b as usize] = child,
        }
        self.header_mut(node).count += 1;
        self.dirty.note(node);
    }
}

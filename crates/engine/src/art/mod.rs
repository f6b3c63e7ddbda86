//! CuART: an adaptive radix tree in a flat, typed-link layout (Koppehel et
//! al., ICPP '21; `notes/003_cuart.md`).
//!
//! - One array per node kind (N4, N16, N48, N256) and per leaf class (keys
//!   of up to 8, 16, 32 bytes, and longer keys whose bytes past 32 live in
//!   a tail heap), every record of fixed size and 16-byte aligned.
//! - A link is `kind << 56 | index`; 0 is empty. The kind is in the link,
//!   not in the node, so every load's address and size are known before it
//!   is issued; the node header's freed byte goes to the inline prefix.
//! - Path compression is optimistic: a header holds the prefix length and
//!   its first 10 bytes; lookups skip the rest and a full-key compare at the
//!   leaf (length included) decides.
//! - The first `lut_depth` (0 to 3) levels are one dense table of links
//!   indexed by the key's first bytes (the paper's 3-byte root table).
//! - Leaves are numbered in key order (in-order build), and each holds a
//!   55-bit value (`build` stores the key's rank).
//!
//! The same buffers serve the CPU lookup here (all cores) and the GPU's
//! (`gpu.rs`, `kernels/art.cu`); they are plain indices, relocatable.
//! Keys must be prefix-free (`keys.rs` encodes text, bytea, int8 so).

pub mod build;
pub mod gpu;
pub mod insert;
pub mod keys;

pub use build::{build, build_with_values, BuildError};
pub use insert::{Dirty, InsertError};
pub use keys::ByteKeys;

use rayon::prelude::*;

pub const EMPTY: u8 = 0;
pub const N4: u8 = 1;
pub const N16: u8 = 2;
pub const N48: u8 = 3;
pub const N256: u8 = 4;
pub const LEAF8: u8 = 5;
pub const LEAF16: u8 = 6;
pub const LEAF32: u8 = 7;
pub const LEAF_LONG: u8 = 8;

const INDEX_MASK: u64 = (1 << 56) - 1;

pub fn link(kind: u8, index: usize) -> u64 {
    debug_assert!((index as u64) <= INDEX_MASK);
    (kind as u64) << 56 | index as u64
}

pub fn kind(link: u64) -> u8 {
    (link >> 56) as u8
}

pub fn index(link: u64) -> usize {
    (link & INDEX_MASK) as usize
}

/// Bytes of the prefix kept in a node header.
pub const INLINE_PREFIX: usize = 10;

/// A node's header: its compressed path (the full length and the first
/// `INLINE_PREFIX` bytes) and its child count. No kind byte.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Header {
    pub prefix_len: u32,
    pub count: u16,
    pub prefix: [u8; INLINE_PREFIX],
}

#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Node4 {
    pub h: Header,
    pub keys: [u8; 8],
    pub child: [u64; 4],
    pub _pad: u64,
}

#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Node16 {
    pub h: Header,
    pub keys: [u8; 16],
    pub child: [u64; 16],
}

/// `index[byte]` is the child slot + 1 (0: no child).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy)]
pub struct Node48 {
    pub h: Header,
    pub index: [u8; 256],
    pub child: [u64; 48],
}

#[repr(C, align(16))]
#[derive(Debug, Clone, Copy)]
pub struct Node256 {
    pub h: Header,
    pub child: [u64; 256],
}

impl Default for Node48 {
    fn default() -> Self {
        Node48 { h: Header::default(), index: [0; 256], child: [0; 48] }
    }
}

impl Default for Node256 {
    fn default() -> Self {
        Node256 { h: Header::default(), child: [0; 256] }
    }
}

/// A leaf's `meta`: the key length (classes up to 32 bytes) in the top
/// byte, a tombstone bit, the value in the low 55 bits.
const LEN_SHIFT: u32 = 56;
pub const TOMBSTONE: u64 = 1 << 55;
pub const VALUE_MASK: u64 = TOMBSTONE - 1;

/// A leaf of `N` key bytes (zero-padded) and its meta word, padded to a
/// multiple of 16 bytes.
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy)]
pub struct Leaf<const N: usize, const PAD: usize> {
    pub key: [u8; N],
    pub meta: u64,
    pub _pad: [u64; PAD],
}

pub type Leaf8 = Leaf<8, 0>;
pub type Leaf16 = Leaf<16, 1>;
pub type Leaf32 = Leaf<32, 1>;

impl<const N: usize, const PAD: usize> Default for Leaf<N, PAD> {
    fn default() -> Self {
        Leaf { key: [0; N], meta: 0, _pad: [0; PAD] }
    }
}

impl<const N: usize, const PAD: usize> Leaf<N, PAD> {
    fn new(key: &[u8], value: u64) -> Self {
        let mut l = Leaf::default();
        l.key[..key.len()].copy_from_slice(key);
        l.meta = (key.len() as u64) << LEN_SHIFT | value;
        l
    }

    fn key(&self) -> &[u8] {
        &self.key[..(self.meta >> LEN_SHIFT) as usize]
    }
}

/// A key longer than 32 bytes: its first 32 bytes inline, the rest at
/// `tail` in the tail heap (8-byte aligned, zero-padded to 8).
#[repr(C, align(16))]
#[derive(Debug, Clone, Copy, Default)]
pub struct LeafLong {
    pub head: [u8; 32],
    pub meta: u64,
    pub len: u64,
    pub tail: u64,
    pub _pad: u64,
}

/// Lookup answer for a key that is absent (or deleted).
pub const NOT_FOUND: u64 = u64::MAX;

/// The flat tree.
#[derive(Debug, Clone, Default)]
pub struct Art {
    pub lut_depth: usize,
    /// 256^lut_depth root links (one for depth 0).
    pub lut: Vec<u64>,
    /// The root table's occupied slots, ascending (host only: the lower
    /// bound's next slot).
    pub slots: Vec<u32>,
    pub n4: Vec<Node4>,
    pub n16: Vec<Node16>,
    pub n48: Vec<Node48>,
    pub n256: Vec<Node256>,
    pub leaf8: Vec<Leaf8>,
    pub leaf16: Vec<Leaf16>,
    pub leaf32: Vec<Leaf32>,
    pub leaf_long: Vec<LeafLong>,
    pub tails: Vec<u64>,
    /// Keys.
    pub n: usize,
    /// Records written by inserts since the device copy's last refresh.
    pub dirty: Dirty,
    /// Node records that inserts grew out of, per kind, for reuse.
    pub free: [Vec<usize>; 5],
}

/// The LUT slot of a key: its first `depth` bytes, zero-padded. (A key
/// shorter than that is alone in its slot: any other key in it would have
/// it as a prefix.)
pub fn lut_slot(key: &[u8], depth: usize) -> usize {
    (0..depth).fold(0, |s, i| s << 8 | *key.get(i).unwrap_or(&0) as usize)
}

impl Art {
    /// Bytes of the flat arrays (what the device holds).
    pub fn bytes(&self) -> usize {
        use std::mem::size_of_val as size;
        size(&self.lut[..])
            + size(&self.n4[..])
            + size(&self.n16[..])
            + size(&self.n48[..])
            + size(&self.n256[..])
            + size(&self.leaf8[..])
            + size(&self.leaf16[..])
            + size(&self.leaf32[..])
            + size(&self.leaf_long[..])
            + size(&self.tails[..])
    }

    /// Array `a` as bytes, in the kernels' argument order: 0 the root
    /// table, 1 to 8 the arrays of that kind, 9 the tail heap.
    pub fn array_bytes(&self, a: usize) -> &[u8] {
        fn bytes<T: Copy>(v: &[T]) -> &[u8] {
            // SAFETY: the records are repr(C) with explicit pads and no
            // implicit padding (sizes checked in tests): every byte is
            // initialised.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match a {
            0 => bytes(&self.lut),
            1 => bytes(&self.n4),
            2 => bytes(&self.n16),
            3 => bytes(&self.n48),
            4 => bytes(&self.n256),
            5 => bytes(&self.leaf8),
            6 => bytes(&self.leaf16),
            7 => bytes(&self.leaf32),
            8 => bytes(&self.leaf_long),
            9 => bytes(&self.tails),
            _ => unreachable!("array {a}"),
        }
    }

    pub fn header(&self, link: u64) -> &Header {
        let i = index(link);
        match kind(link) {
            N4 => &self.n4[i].h,
            N16 => &self.n16[i].h,
            N48 => &self.n48[i].h,
            N256 => &self.n256[i].h,
            k => unreachable!("kind {k} has no header"),
        }
    }

    /// The child of inner node `link` for byte `b` (0: none).
    pub fn child(&self, link: u64, b: u8) -> u64 {
        let i = index(link);
        match kind(link) {
            N4 => {
                let n = &self.n4[i];
                (0..n.h.count as usize).find(|&j| n.keys[j] == b).map_or(0, |j| n.child[j])
            }
            N16 => {
                let n = &self.n16[i];
                (0..n.h.count as usize).find(|&j| n.keys[j] == b).map_or(0, |j| n.child[j])
            }
            N48 => {
                let n = &self.n48[i];
                match n.index[b as usize] {
                    0 => 0,
                    s => n.child[s as usize - 1],
                }
            }
            N256 => self.n256[index(link)].child[b as usize],
            k => unreachable!("kind {k} has no children"),
        }
    }

    /// The children of inner node `link` in byte order, as (byte, link).
    pub fn children(&self, link: u64) -> Vec<(u8, u64)> {
        let i = index(link);
        match kind(link) {
            N4 => {
                let n = &self.n4[i];
                (0..n.h.count as usize).map(|j| (n.keys[j], n.child[j])).collect()
            }
            N16 => {
                let n = &self.n16[i];
                (0..n.h.count as usize).map(|j| (n.keys[j], n.child[j])).collect()
            }
            _ => (0..=255u8).map(|b| (b, self.child(link, b))).filter(|c| c.1 != 0).collect(),
        }
    }

    /// A leaf's key bytes and meta word.
    pub fn leaf(&self, link: u64) -> (Vec<u8>, u64) {
        let i = index(link);
        match kind(link) {
            LEAF8 => (self.leaf8[i].key().to_vec(), self.leaf8[i].meta),
            LEAF16 => (self.leaf16[i].key().to_vec(), self.leaf16[i].meta),
            LEAF32 => (self.leaf32[i].key().to_vec(), self.leaf32[i].meta),
            LEAF_LONG => {
                let l = &self.leaf_long[i];
                let mut k = l.head.to_vec();
                let rest = l.len as usize - 32;
                let tail: &[u8] = bytes_of(&self.tails[l.tail as usize / 8..]);
                k.extend_from_slice(&tail[..rest]);
                (k, l.meta)
            }
            k => unreachable!("kind {k} is not a leaf"),
        }
    }

    /// Whether leaf `link` holds exactly `q` (the full compare, length
    /// first).
    fn leaf_holds(&self, link: u64, q: &[u8]) -> bool {
        let i = index(link);
        let short = |key: &[u8], meta: u64| (meta >> LEN_SHIFT) as usize == q.len() && &key[..q.len()] == q;
        match kind(link) {
            LEAF8 => short(&self.leaf8[i].key, self.leaf8[i].meta),
            LEAF16 => short(&self.leaf16[i].key, self.leaf16[i].meta),
            LEAF32 => short(&self.leaf32[i].key, self.leaf32[i].meta),
            LEAF_LONG => {
                let l = &self.leaf_long[i];
                let tail: &[u8] = bytes_of(&self.tails[l.tail as usize / 8..]);
                l.len as usize == q.len() && l.head == q[..32] && tail[..q.len() - 32] == q[32..]
            }
            k => unreachable!("kind {k} is not a leaf"),
        }
    }

    fn meta(&self, link: u64) -> u64 {
        let i = index(link);
        match kind(link) {
            LEAF8 => self.leaf8[i].meta,
            LEAF16 => self.leaf16[i].meta,
            LEAF32 => self.leaf32[i].meta,
            LEAF_LONG => self.leaf_long[i].meta,
            k => unreachable!("kind {k} is not a leaf"),
        }
    }

    fn meta_mut(&mut self, link: u64) -> &mut u64 {
        let i = index(link);
        match kind(link) {
            LEAF8 => &mut self.leaf8[i].meta,
            LEAF16 => &mut self.leaf16[i].meta,
            LEAF32 => &mut self.leaf32[i].meta,
            LEAF_LONG => &mut self.leaf_long[i].meta,
            k => unreachable!("kind {k} is not a leaf"),
        }
    }

    /// The leaf holding exactly `q` (deleted or not).
    pub fn find_leaf(&self, q: &[u8]) -> Option<u64> {
        let mut link = self.lut[lut_slot(q, self.lut_depth)];
        let mut d = self.lut_depth;
        loop {
            match kind(link) {
                EMPTY => return None,
                LEAF8..=LEAF_LONG => return self.leaf_holds(link, q).then_some(link),
                _ => {
                    let h = self.header(link);
                    let p = h.prefix_len as usize;
                    // Every key below has more than d + p bytes.
                    if q.len() <= d + p {
                        return None;
                    }
                    let inline = p.min(INLINE_PREFIX);
                    if q[d..d + inline] != h.prefix[..inline] {
                        return None;
                    }
                    d += p;
                    link = self.child(link, q[d]);
                    d += 1;
                }
            }
        }
    }

    /// The value stored for key `q`, if present (not deleted).
    pub fn get(&self, q: &[u8]) -> Option<u64> {
        let meta = self.meta(self.find_leaf(q)?);
        (meta & TOMBSTONE == 0).then_some(meta & VALUE_MASK)
    }

    /// The batched value update on the host copy, with the device's
    /// semantics (`gpu::DeviceArt::update`): key `i` gets `values[i]`, or
    /// is deleted by `gpu::DELETE`; a later update of a key wins; absent
    /// keys are skipped. Returns the leaves written.
    pub fn update(&mut self, keys: &ByteKeys, values: &[u64]) -> u64 {
        assert_eq!(keys.len(), values.len());
        let links: Vec<Option<u64>> = (0..keys.len()).into_par_iter().map(|i| self.find_leaf(keys.get(i))).collect();
        let mut last = std::collections::HashMap::new();
        for (i, l) in links.iter().enumerate() {
            if let Some(l) = l {
                last.insert(*l, i);
            }
        }
        for (&l, &i) in &last {
            self.dirty.note(l);
            let m = self.meta_mut(l);
            *m = if values[i] == TOMBSTONE { *m | TOMBSTONE } else { (*m & !(TOMBSTONE | VALUE_MASK)) | values[i] };
        }
        last.len() as u64
    }

    /// `get` for each query, on all cores: values, or `NOT_FOUND`.
    pub fn lookup_cpu(&self, queries: &ByteKeys, out: &mut [u64]) {
        out.par_iter_mut().enumerate().with_min_len(1024).for_each(|(i, o)| *o = self.get(queries.get(i)).unwrap_or(NOT_FOUND));
    }

    /// The child of inner node `link` with the smallest byte above `b`
    /// (any byte when `b` is None), or 0.
    pub fn next_child(&self, link: u64, b: Option<u8>) -> u64 {
        let i = index(link);
        let from = b.map_or(0, |b| b as usize + 1);
        match kind(link) {
            N4 => {
                let n = &self.n4[i];
                (0..n.h.count as usize).find(|&j| n.keys[j] as usize >= from).map_or(0, |j| n.child[j])
            }
            N16 => {
                let n = &self.n16[i];
                (0..n.h.count as usize).find(|&j| n.keys[j] as usize >= from).map_or(0, |j| n.child[j])
            }
            N48 => {
                let n = &self.n48[i];
                (from..256).find(|&c| n.index[c] != 0).map_or(0, |c| n.child[n.index[c] as usize - 1])
            }
            N256 => (from..256).map(|c| self.n256[i].child[c]).find(|&l| l != 0).unwrap_or(0),
            k => unreachable!("kind {k} has no children"),
        }
    }

    /// The leftmost leaf below `link`.
    fn edge_leaf(&self, mut link: u64) -> u64 {
        while kind(link) < LEAF8 {
            link = self.next_child(link, None);
        }
        link
    }

    fn first_value(&self, link: u64) -> u64 {
        self.meta(self.edge_leaf(link)) & VALUE_MASK
    }

    /// Key bytes `from..to` of leaf `link` (to <= its length).
    fn leaf_bytes(&self, link: u64, from: usize, to: usize) -> &[u8] {
        let i = index(link);
        match kind(link) {
            LEAF8 => &self.leaf8[i].key[from..to],
            LEAF16 => &self.leaf16[i].key[from..to],
            LEAF32 => &self.leaf32[i].key[from..to],
            LEAF_LONG if to <= 32 => &self.leaf_long[i].head[from..to],
            LEAF_LONG => {
                debug_assert!(from >= 32, "a long key's bytes across its head and tail");
                let tail: &[u8] = bytes_of(&self.tails[self.leaf_long[i].tail as usize / 8..]);
                &tail[from - 32..to - 32]
            }
            k => unreachable!("kind {k} is not a leaf"),
        }
    }

    fn leaf_byte(&self, link: u64, j: usize) -> u8 {
        self.leaf_bytes(link, j, j + 1)[0]
    }

    /// The values (ranks, as `build` stores) bounding the keys that start
    /// with `prefix`: `[lower_bound(prefix), lower_bound(successor))`, the
    /// range a prefix search (`^@`) reads; on the GPU, the same two lower
    /// bounds in one batch.
    pub fn prefix_range(&self, prefix: &[u8]) -> (u64, u64) {
        let end = keys::prefix_successor(prefix).map_or(self.n as u64, |s| self.lower_bound(&s));
        (self.lower_bound(prefix), end)
    }

    /// Leaf `link`'s key compared with `q`.
    fn leaf_cmp(&self, link: u64, q: &[u8]) -> std::cmp::Ordering {
        let len = match kind(link) {
            LEAF_LONG => self.leaf_long[index(link)].len as usize,
            _ => (self.meta(link) >> LEN_SHIFT) as usize,
        };
        let head = len.min(32);
        let qh = &q[..q.len().min(32)];
        self.leaf_bytes(link, 0, head).cmp(qh).then_with(|| {
            if len > 32 {
                self.leaf_bytes(link, 32, len).cmp(&q[qh.len()..])
            } else {
                head.cmp(&q.len())
            }
        })
    }

    /// The value of the first key >= `q` (any bytes, not only a key's
    /// encoding), or `n` when there is none; with the values `build`
    /// stores (ranks), the lower bound. Tombstoned leaves still count.
    ///
    /// One descent, no backtracking (the kernel's algorithm too): it keeps
    /// the deepest subtree met whose keys all follow the path's (the next
    /// child after the byte taken); where the path's keys all precede `q`,
    /// that subtree's first key is the answer (else the next root slot's).
    pub fn lower_bound(&self, q: &[u8]) -> u64 {
        use std::cmp::Ordering::*;
        let slot = lut_slot(q, self.lut_depth);
        let (mut link, mut d, mut after) = (self.lut[slot], self.lut_depth, 0);
        // A query shorter than the table's depth sorts before every key of
        // its zero-padded slot.
        if q.len() < self.lut_depth && link != 0 {
            return self.first_value(link);
        }
        while link != 0 {
            if kind(link) >= LEAF8 {
                if self.leaf_cmp(link, q) != Less {
                    return self.meta(link) & VALUE_MASK;
                }
                break;
            }
            let h = self.header(link);
            let p = h.prefix_len as usize;
            // Against the full prefix: from a leaf when longer than the
            // inline part.
            let qp = &q[d.min(q.len())..(d + p).min(q.len())];
            let ord = if p <= INLINE_PREFIX {
                qp.cmp(&h.prefix[..p])
            } else {
                let leaf = self.edge_leaf(link);
                qp.iter().copied().cmp((d..d + p).map(|j| self.leaf_byte(leaf, j)))
            };
            match ord {
                Less => return self.first_value(link),
                Greater => break,
                // q ends inside or right at the prefix: before every key here.
                Equal if q.len() <= d + p => return self.first_value(link),
                Equal => {}
            }
            let b = q[d + p];
            let next = self.next_child(link, Some(b));
            if next != 0 {
                after = next;
            }
            (link, d) = (self.child(link, b), d + p + 1);
        }
        if after != 0 {
            return self.first_value(after);
        }
        let next = self.slots.partition_point(|&s| s as usize <= slot);
        self.slots.get(next).map_or(self.n as u64, |&s| self.first_value(self.lut[s as usize]))
    }
}

/// Bytes of one record of each array (`Art::array_bytes`).
pub const RECORD_BYTES: [usize; 10] = [8, 64, 160, 656, 2064, 16, 32, 48, 64, 8];

/// `u64`s viewed as their bytes (the tail heap).
fn bytes_of(words: &[u64]) -> &[u8] {
    // SAFETY: u8 has no alignment and any bits are valid.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, std::mem::size_of_val(words)) }
}

#[cfg(test)]
mod tests;

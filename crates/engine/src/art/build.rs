//! The flat build straight from sorted keys (the digest's alternative to a
//! pointer ART flattened afterwards): a key range that shares its first `d`
//! bytes becomes a leaf when it holds one key, else a node whose prefix is
//! the range's longest common prefix past `d` and whose children are the
//! runs of equal next bytes; the node kind follows the child count. Nodes
//! and leaves are numbered in key order (depth first, children in byte
//! order). The root table's slots are split into parts built on all cores
//! into their own arrays, then concatenated with their links rebased.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// Key `i` is not greater than key `i - 1`.
    NotSorted(usize),
    /// Key `i - 1` is a prefix of key `i` (encode keys prefix-free).
    Prefix(usize),
    /// Value of key `i` does not fit 55 bits.
    Value(usize),
    /// The root table's depth is not 0 to 3.
    LutDepth(usize),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::NotSorted(i) => write!(f, "key {i} is not greater than the key before it"),
            BuildError::Prefix(i) => write!(f, "key {} is a prefix of key {i}", i - 1),
            BuildError::Value(i) => write!(f, "the value of key {i} does not fit 55 bits"),
            BuildError::LutDepth(d) => write!(f, "root table depth {d} is not 0 to 3"),
        }
    }
}

/// The tree of `keys` (sorted, distinct, prefix-free), each key's value
/// its rank.
pub fn build(keys: &ByteKeys, lut_depth: usize) -> Result<Art, BuildError> {
    build_from(keys, |i| i as u64, lut_depth)
}

/// The tree of `keys` with `values[i]` stored for key `i`.
pub fn build_with_values(keys: &ByteKeys, values: &[u64], lut_depth: usize) -> Result<Art, BuildError> {
    assert_eq!(keys.len(), values.len());
    build_from(keys, |i| values[i], lut_depth)
}

fn build_from(keys: &ByteKeys, value: impl Fn(usize) -> u64 + Sync, lut_depth: usize) -> Result<Art, BuildError> {
    if lut_depth > 3 {
        return Err(BuildError::LutDepth(lut_depth));
    }
    let n = keys.len();
    let bad = (1..n)
        .into_par_iter()
        .with_min_len(4096)
        .find_first(|&i| keys.get(i - 1) >= keys.get(i) || keys.get(i).starts_with(keys.get(i - 1)));
    if let Some(i) = bad {
        return Err(if keys.get(i - 1) >= keys.get(i) { BuildError::NotSorted(i) } else { BuildError::Prefix(i) });
    }
    if let Some(i) = (0..n).into_par_iter().find_first(|&i| value(i) > VALUE_MASK) {
        return Err(BuildError::Value(i));
    }
    // The first key of each root-table slot (slots ascend with the keys).
    let slot = |i: usize| lut_slot(keys.get(i), lut_depth);
    let mut starts: Vec<usize> = (0..n).into_par_iter().with_min_len(4096).filter(|&i| i == 0 || slot(i) != slot(i - 1)).collect();
    starts.push(n);
    // Parts of whole slots, about n / (4 x cores) keys each.
    let target = n.div_ceil(4 * rayon::current_num_threads()).max(1 << 12);
    let mut cuts = vec![0];
    for (g, &s) in starts.iter().enumerate().skip(1) {
        if s - starts[cuts[cuts.len() - 1]] >= target || g == starts.len() - 1 {
            cuts.push(g);
        }
    }
    let mut parts: Vec<(Art, Vec<(usize, u64)>)> = cuts
        .par_windows(2)
        .map(|w| {
            let mut a = Art::default();
            let roots =
                (w[0]..w[1]).map(|g| (slot(starts[g]), subtree(&mut a, keys, &value, starts[g], starts[g + 1], lut_depth))).collect();
            (a, roots)
        })
        .collect();
    let mut art = Art { lut_depth, lut: vec![0; 1 << (8 * lut_depth)], n, ..Art::default() };
    let mut at = [0usize; 9];
    let mut offsets = Vec::with_capacity(parts.len());
    for (a, _) in &parts {
        offsets.push(at);
        let sizes =
            [0, a.n4.len(), a.n16.len(), a.n48.len(), a.n256.len(), a.leaf8.len(), a.leaf16.len(), a.leaf32.len(), a.leaf_long.len()];
        (1..9).for_each(|k| at[k] += sizes[k]);
        at[0] += a.tails.len();
    }
    parts.par_iter_mut().zip(&offsets).for_each(|((a, roots), off)| rebase(a, roots, off));
    for (a, roots) in parts {
        for (s, l) in roots {
            art.lut[s] = l;
            art.slots.push(s as u32);
        }
        art.n4.extend(a.n4);
        art.n16.extend(a.n16);
        art.n48.extend(a.n48);
        art.n256.extend(a.n256);
        art.leaf8.extend(a.leaf8);
        art.leaf16.extend(a.leaf16);
        art.leaf32.extend(a.leaf32);
        art.leaf_long.extend(a.leaf_long);
        art.tails.extend(a.tails);
    }
    Ok(art)
}

/// Adds a part's place in the concatenated arrays to its links (`off[k]`
/// for kind k; `off[0]`: tail words).
fn rebase(a: &mut Art, roots: &mut [(usize, u64)], off: &[usize; 9]) {
    let fix = |l: &mut u64| {
        if *l != 0 {
            *l += off[kind(*l) as usize] as u64;
        }
    };
    roots.iter_mut().for_each(|(_, l)| fix(l));
    a.n4.iter_mut().for_each(|n| n.child.iter_mut().for_each(fix));
    a.n16.iter_mut().for_each(|n| n.child.iter_mut().for_each(fix));
    a.n48.iter_mut().for_each(|n| n.child.iter_mut().for_each(fix));
    a.n256.iter_mut().for_each(|n| n.child.iter_mut().for_each(fix));
    a.leaf_long.iter_mut().for_each(|l| l.tail += 8 * off[0] as u64);
}

/// Builds keys `lo..hi` (sharing their first `d` bytes) into `a`; returns
/// the subtree's link. Depth first with an explicit stack: a chain of
/// nodes can be as long as the keys.
fn subtree(a: &mut Art, keys: &ByteKeys, value: &impl Fn(usize) -> u64, lo: usize, hi: usize, d: usize) -> u64 {
    let mut root = 0;
    // (lo, hi, d, parent link and the child's byte and slot there)
    let mut stack = vec![(lo, hi, d, None::<(u64, u8, usize)>)];
    while let Some((lo, hi, d, place)) = stack.pop() {
        let l = if hi - lo == 1 {
            push_leaf(a, keys.get(lo), value(lo))
        } else {
            let (first, last) = (keys.get(lo), keys.get(hi - 1));
            let lcp = first[d..].iter().zip(&last[d..]).take_while(|(x, y)| x == y).count();
            let dd = d + lcp;
            // Runs of equal bytes at dd (every key is longer than dd: they
            // are prefix-free and at least two share these bytes).
            let mut runs = Vec::new();
            let mut s = lo;
            while s < hi {
                let b = keys.get(s)[dd];
                let (mut e, mut r) = (s + 1, hi);
                while e < r {
                    let m = (e + r) / 2;
                    if keys.get(m)[dd] == b {
                        e = m + 1;
                    } else {
                        r = m;
                    }
                }
                runs.push((b, s, e));
                s = e;
            }
            let bytes: Vec<u8> = runs.iter().map(|r| r.0).collect();
            let node = push_node(a, &first[d..dd], &bytes, kind_for(bytes.len()));
            for (j, &(b, s, e)) in runs.iter().enumerate().rev() {
                stack.push((s, e, dd + 1, Some((node, b, j))));
            }
            node
        };
        match place {
            None => root = l,
            Some((p, b, j)) => set_child(a, p, b, j, l),
        }
    }
    root
}

/// The smallest node kind that holds `children`.
pub(super) fn kind_for(children: usize) -> u8 {
    match children {
        0..=4 => N4,
        5..=16 => N16,
        17..=48 => N48,
        _ => N256,
    }
}

pub(super) fn push_leaf(a: &mut Art, key: &[u8], value: u64) -> u64 {
    match key.len() {
        0..=8 => {
            a.leaf8.push(Leaf8::new(key, value));
            link(LEAF8, a.leaf8.len() - 1)
        }
        9..=16 => {
            a.leaf16.push(Leaf16::new(key, value));
            link(LEAF16, a.leaf16.len() - 1)
        }
        17..=32 => {
            a.leaf32.push(Leaf32::new(key, value));
            link(LEAF32, a.leaf32.len() - 1)
        }
        len => {
            let mut l = LeafLong { meta: value, len: len as u64, tail: 8 * a.tails.len() as u64, ..LeafLong::default() };
            l.head.copy_from_slice(&key[..32]);
            for w in key[32..].chunks(8) {
                let mut b = [0u8; 8];
                b[..w.len()].copy_from_slice(w);
                a.tails.push(u64::from_ne_bytes(b));
            }
            a.leaf_long.push(l);
            link(LEAF_LONG, a.leaf_long.len() - 1)
        }
    }
}

/// Appends a node of `kind` with `prefix` and child bytes `bytes` (the
/// links are set afterwards, by `set_child`).
pub(super) fn push_node(a: &mut Art, prefix: &[u8], bytes: &[u8], kind: u8) -> u64 {
    let mut h = Header { prefix_len: prefix.len() as u32, count: bytes.len() as u16, prefix: [0; INLINE_PREFIX] };
    let inline = prefix.len().min(INLINE_PREFIX);
    h.prefix[..inline].copy_from_slice(&prefix[..inline]);
    match kind {
        N4 => {
            let mut n = Node4 { h, ..Node4::default() };
            n.keys[..bytes.len()].copy_from_slice(bytes);
            a.n4.push(n);
            link(N4, a.n4.len() - 1)
        }
        N16 => {
            let mut n = Node16 { h, ..Node16::default() };
            n.keys[..bytes.len()].copy_from_slice(bytes);
            a.n16.push(n);
            link(N16, a.n16.len() - 1)
        }
        N48 => {
            let mut n = Node48 { h, ..Node48::default() };
            for (j, &b) in bytes.iter().enumerate() {
                n.index[b as usize] = j as u8 + 1;
            }
            a.n48.push(n);
            link(N48, a.n48.len() - 1)
        }
        _ => {
            a.n256.push(Node256 { h, ..Node256::default() });
            link(N256, a.n256.len() - 1)
        }
    }
}

pub(super) fn set_child(a: &mut Art, node: u64, b: u8, slot: usize, child: u64) {
    let i = index(node);
    match kind(node) {
        N4 => a.n4[i].child[slot] = child,
        N16 => a.n16[i].child[slot] = child,
        N48 => a.n48[i].child[slot] = child,
        N256 => a.n256[i].child[b as usize] = child,
        k => unreachable!("kind {k} has no children"),
    }
}

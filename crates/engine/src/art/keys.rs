//! Variable-length keys for the radix tree: a batch of byte strings in one
//! buffer, and the byte-comparable encodings that make memcmp order the
//! value order and no key a prefix of another (what a radix tree needs).

use rayon::prelude::*;
use std::cmp::Ordering;

/// How many 8-byte words past the prefix all keys share `order_by`
/// sorts by at most (the rest by comparisons): a bound on its recursion
/// whatever the keys' length.
const RADIX_LEVELS: usize = 32;

/// Runs of at least this many keys sort on all cores.
const PARALLEL_RUN: usize = 4096;

/// Keys a task of the pool copies or encodes.
const PIECE: usize = 4096;

/// Keys a task of the pool takes at least where it compares or reads
/// words: fewer than twice as many stay on the calling thread. A hand-off
/// costs several microseconds on 16 cores, and a small `= ANY` made
/// several (a 10-key array took ~70 us where hash takes 20).
const MIN_TASK: usize = 1024;

/// Byte strings packed in one buffer: key `i` is `data[ends[i-1]..ends[i]]`.
/// (A `Vec<Vec<u8>>` of 10^8 keys would cost a heap block each.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByteKeys {
    data: Vec<u8>,
    ends: Vec<u64>,
}

/// One buffer of pieces of `lens` bytes, in order, piece `i` written by
/// `fill(i, piece)` on all cores.
fn filled(lens: impl Iterator<Item = usize>, fill: impl Fn(usize, &mut [u8]) + Sync) -> Vec<u8> {
    let lens: Vec<usize> = lens.collect();
    let mut data = vec![0u8; lens.iter().sum()];
    let mut pieces = Vec::with_capacity(lens.len());
    let mut rest = &mut data[..];
    for (i, &n) in lens.iter().enumerate() {
        let (piece, more) = std::mem::take(&mut rest).split_at_mut(n);
        pieces.push((i, piece));
        rest = more;
    }
    pieces.into_par_iter().for_each(|(i, piece)| fill(i, piece));
    data
}

impl ByteKeys {
    pub fn new() -> ByteKeys {
        ByteKeys::default()
    }

    pub fn push(&mut self, key: &[u8]) {
        self.data.extend_from_slice(key);
        self.ends.push(self.data.len() as u64);
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The packed bytes and the end offsets.
    pub fn parts(&self) -> (&[u8], &[u64]) {
        (&self.data, &self.ends)
    }

    /// Bytes of key data (without the offsets).
    pub fn data_bytes(&self) -> usize {
        self.data.len()
    }

    /// The keys in byte order with duplicates removed, on all cores (the
    /// comparisons with the key before and the copies too: each a random
    /// read, they were a sixth of a 128K-uuid `= ANY` scan on one core).
    pub fn sorted_unique(&self) -> ByteKeys {
        let order = self.order_by(|_, _| Ordering::Equal);
        let firsts: Vec<usize> = self.run_starts(&order).into_iter().map(|j| order[j]).collect();
        self.gather(&firsts)
    }

    /// Where each run of equal keys starts in `order` (positions of keys
    /// in byte order), on all cores.
    pub fn run_starts(&self, order: &[usize]) -> Vec<usize> {
        (0..order.len())
            .into_par_iter()
            .with_min_len(MIN_TASK)
            .filter(|&j| j == 0 || self.get(order[j - 1]) != self.get(order[j]))
            .collect()
    }

    /// The encodings `enc` appends of `raw`, in order, made on all cores.
    pub fn encoded(raw: &[&[u8]], enc: impl Fn(&[u8], &mut Vec<u8>) + Sync) -> ByteKeys {
        let mut parts: Vec<ByteKeys> = raw
            .par_chunks(PIECE)
            .map(|keys| {
                let mut part = ByteKeys::new();
                part.ends.reserve(keys.len());
                for k in keys {
                    enc(k, &mut part.data);
                    part.ends.push(part.data.len() as u64);
                }
                part
            })
            .collect();
        if parts.len() == 1 {
            return parts.pop().expect("one part");
        }
        let mut ends = Vec::with_capacity(raw.len());
        let mut base = 0;
        for p in &parts {
            ends.extend(p.ends.iter().map(|e| e + base));
            base += p.data.len() as u64;
        }
        let data = filled(parts.iter().map(|p| p.data.len()), |i, out| out.copy_from_slice(&parts[i].data));
        ByteKeys { data, ends }
    }

    /// Keys `which`, in that order, copied on all cores.
    pub fn gather(&self, which: &[usize]) -> ByteKeys {
        let mut ends = Vec::with_capacity(which.len());
        let mut total = 0u64;
        for &i in which {
            total += self.get(i).len() as u64;
            ends.push(total);
        }
        let pieces: Vec<&[usize]> = which.chunks(PIECE).collect();
        let piece_end = |i: usize| if i == 0 { 0 } else { ends[(i * PIECE).min(which.len()) - 1] as usize };
        let data = filled((0..pieces.len()).map(|i| piece_end(i + 1) - piece_end(i)), |i, out| {
            let mut at = 0;
            for &k in pieces[i] {
                let k = self.get(k);
                out[at..at + k.len()].copy_from_slice(k);
                at += k.len();
            }
        });
        ByteKeys { data, ends }
    }

    /// The keys' positions in byte order, `tie` ordering equal keys, on
    /// all cores.
    ///
    /// A radix sort by 8-byte words (`sort_words`): sorting positions by
    /// the keys themselves was most of a 128K-key `= ANY` scan's time on
    /// two cores (a random read of two keys for every comparison, memcmp
    /// through the prefix URLs share).
    pub fn order_by(&self, tie: impl Fn(usize, usize) -> Ordering + Sync) -> Vec<usize> {
        let skip = self.common_prefix();
        let mut order: Vec<(u64, u32)> =
            (0..self.len() as u32).into_par_iter().with_min_len(MIN_TASK).map(|i| (self.word(i, skip), i)).collect();
        order.par_sort_unstable_by_key(|e| e.0);
        self.sort_runs(&mut order, skip, RADIX_LEVELS, &tie);
        order.into_iter().map(|(_, i)| i as usize).collect()
    }

    /// Sorts each run of one word of `sorted` (sorted by words) on, in
    /// parallel (`sort_words`).
    fn sort_runs(&self, sorted: &mut [(u64, u32)], depth: usize, levels: usize, tie: &(impl Fn(usize, usize) -> Ordering + Sync)) {
        let total = sorted.len();
        let mut runs: Vec<&mut [(u64, u32)]> = Vec::new();
        let mut rest = sorted;
        while !rest.is_empty() {
            let n = rest.iter().take_while(|e| e.0 == rest[0].0).count();
            let (run, more) = rest.split_at_mut(n);
            if n > 1 {
                runs.push(run);
            }
            rest = more;
        }
        let sort = |run: &mut [(u64, u32)]| self.sort_words(run, depth, levels, tie);
        if total < 2 * MIN_TASK {
            runs.into_iter().for_each(sort);
        } else {
            runs.into_par_iter().for_each(sort);
        }
    }

    /// Sorts `run`, keys sharing their bytes up to `depth + 8` (the words
    /// at `depth`, zero-padded past a key's end, are equal): keys that
    /// end by then are prefixes of the others, first, by length (`tie`
    /// among equal ones); the others by their next words, recursively
    /// (`levels` deeper at most: then, or for few keys, by comparing the
    /// rest of the keys). Large runs (URLs of one host) sort on all cores.
    fn sort_words(&self, run: &mut [(u64, u32)], depth: usize, levels: usize, tie: &(impl Fn(usize, usize) -> Ordering + Sync)) {
        let len = |e: &(u64, u32)| self.get(e.1 as usize).len();
        let sort = |run: &mut [(u64, u32)], cmp: &(dyn Fn(&(u64, u32), &(u64, u32)) -> Ordering + Sync)| {
            if run.len() >= PARALLEL_RUN {
                run.par_sort_unstable_by(cmp)
            } else {
                run.sort_unstable_by(cmp)
            }
        };
        if levels == 0 || run.len() <= 8 {
            let rest = |e: &(u64, u32)| &self.get(e.1 as usize)[depth.min(len(e))..];
            sort(run, &|a, b| rest(a).cmp(rest(b)).then_with(|| tie(a.1 as usize, b.1 as usize)));
            return;
        }
        let next = depth + 8;
        // Keys that end here first (a pass to see whether any does: most
        // runs of long keys have none, and need no sort for it).
        let from = if run.iter().any(|e| len(e) <= next) {
            let ended = |e: &(u64, u32)| (len(e) > next, len(e).min(next + 1));
            sort(run, &|a, b| {
                ended(a).cmp(&ended(b)).then_with(|| if len(a) <= next { tie(a.1 as usize, b.1 as usize) } else { Ordering::Equal })
            });
            run.partition_point(|e| len(e) <= next)
        } else {
            0
        };
        let longer = &mut run[from..];
        if longer.len() < 2 {
            return;
        }
        longer.iter_mut().for_each(|e| e.0 = self.word(e.1, next));
        sort(longer, &|a, b| a.0.cmp(&b.0));
        self.sort_runs(longer, next, levels - 1, tie);
    }

    /// Key i's 8 bytes from `at` as a big-endian word, zeros past its end:
    /// two keys equal before `at` whose words differ are in the order of
    /// their words (a zero past a key's end ranks it first, as a shorter
    /// key does).
    fn word(&self, i: u32, at: usize) -> u64 {
        let k = self.get(i as usize);
        let tail = &k[at.min(k.len())..];
        if let Some(w) = tail.first_chunk::<8>() {
            // One load (a copy of a variable length is a memmove call,
            // which was a fifth of sorting 128K URLs).
            return u64::from_be_bytes(*w);
        }
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(tail) {
            *d = *s;
        }
        u64::from_be_bytes(w)
    }

    /// The length of the prefix every key shares.
    fn common_prefix(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        let first = self.get(0);
        (1..self.len())
            .into_par_iter()
            .with_min_len(MIN_TASK)
            .map(|i| first.iter().zip(self.get(i)).take_while(|(a, b)| a == b).count())
            .min()
            .unwrap_or(first.len())
    }

    /// The position of the first key >= `q` (keys sorted): the sorted
    /// string array, the CPU baseline.
    pub fn lower_bound(&self, q: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.get(mid) < q {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

impl ByteKeys {
    /// The position of key `q` (keys sorted), if present.
    pub fn position(&self, q: &[u8]) -> Option<usize> {
        let i = self.lower_bound(q);
        (i < self.len() && self.get(i) == q).then_some(i)
    }
}

impl<'a> FromIterator<&'a [u8]> for ByteKeys {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(iter: I) -> Self {
        let mut k = ByteKeys::new();
        for key in iter {
            k.push(key);
        }
        k
    }
}

/// text in C collation: its UTF-8 bytes and a 0 terminator (text holds no
/// NUL, so no key is a prefix of another, and memcmp order is C order).
pub fn encode_text(s: &[u8], out: &mut Vec<u8>) {
    debug_assert!(!s.contains(&0));
    out.extend_from_slice(s);
    out.push(0);
}

/// bytea: each 0 byte escaped as 0 0xFF, terminated by 0 0 (prefix-free,
/// order-preserving: the terminator sorts below every escaped 0 and every
/// other byte).
pub fn encode_bytea(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// int8: big-endian with the sign bit flipped.
pub fn encode_int8(x: i64) -> [u8; 8] {
    ((x as u64) ^ (1 << 63)).to_be_bytes()
}

/// The smallest byte string greater than every string that starts with
/// `prefix` (None when there is none: the prefix is all 0xFF): the upper
/// end of a prefix search.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let end = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut s = prefix[..=end].to_vec();
    s[end] += 1;
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_keep_order_and_are_prefix_free() {
        let raw: Vec<&[u8]> = vec![b"", b"\0", b"\0\0", b"\0\x01", b"a", b"a\0", b"a\0b", b"ab", b"\xff"];
        let enc: Vec<Vec<u8>> = raw
            .iter()
            .map(|s| {
                let mut v = Vec::new();
                encode_bytea(s, &mut v);
                v
            })
            .collect();
        for i in 0..raw.len() {
            for j in 0..raw.len() {
                assert_eq!(raw[i].cmp(raw[j]), enc[i].cmp(&enc[j]), "{:?} {:?}", raw[i], raw[j]);
                if i != j {
                    assert!(!enc[j].starts_with(&enc[i]));
                }
            }
        }
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        assert!(ints.windows(2).all(|w| encode_int8(w[0]) < encode_int8(w[1])));
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff"), None);
    }

    #[test]
    fn sorted_unique_and_lower_bound() {
        let k: ByteKeys = [&b"b"[..], b"a", b"ab", b"b", b""].into_iter().collect();
        let s = k.sorted_unique();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![&b""[..], b"a", b"ab", b"b"]);
        assert_eq!(s.lower_bound(b"aa"), 2);
        assert_eq!(s.lower_bound(b"c"), 4);
        assert_eq!(s.lower_bound(b""), 0);
    }

    /// The word-and-position sort against a plain sort of the keys: keys
    /// sharing long prefixes, keys that are prefixes of others, zero
    /// bytes (a zero word pads short keys), duplicates, one key.
    #[test]
    fn encoded_equals_one_by_one() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let raw: Vec<Vec<u8>> = (0..10_000).map(|i| (0..(i % 37)).map(|_| rng.below(3) as u8).collect()).collect();
        let slices: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
        for n in [0, 1, 4095, 4096, 4097, 10_000] {
            let mut one = ByteKeys::new();
            let mut e = Vec::new();
            for k in &slices[..n] {
                e.clear();
                encode_bytea(k, &mut e);
                one.push(&e);
            }
            assert_eq!(ByteKeys::encoded(&slices[..n], encode_bytea), one, "{n} keys");
        }
    }

    #[test]
    fn sorted_unique_equals_a_plain_sort() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for (shared, alphabet) in [(0usize, 256u64), (20, 3), (3, 2), (40, 256)] {
            let base: Vec<u8> = (0..shared).map(|i| b'a' + (i % 26) as u8).collect();
            let mut raw: Vec<Vec<u8>> = Vec::new();
            for _ in 0..5000 {
                let mut k = base.clone();
                k.extend((0..next(14)).map(|_| next(alphabet) as u8));
                raw.push(k);
            }
            let dup = raw[17].clone();
            raw.extend([dup.clone(), dup, base.clone()]);
            let keys: ByteKeys = raw.iter().map(|k| k.as_slice()).collect();
            let mut want = raw.clone();
            want.sort();
            want.dedup();
            assert_eq!(keys.sorted_unique().iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), want);
        }
        // Equal keys in the order `tie` gives (here: last position first),
        // among them long ones past the radix levels.
        let long = vec![b'x'; 8 * RADIX_LEVELS + 100];
        let mut raw: Vec<Vec<u8>> = (0..3000).map(|_| (0..next(3)).map(|_| next(2) as u8).collect()).collect();
        raw.extend((0..40).map(|i| if i % 2 == 0 { long.clone() } else { [&long[..], b"y"].concat() }));
        let keys: ByteKeys = raw.iter().map(|k| k.as_slice()).collect();
        let mut want: Vec<usize> = (0..raw.len()).collect();
        want.sort_by(|&a, &b| raw[a].cmp(&raw[b]).then(b.cmp(&a)));
        assert_eq!(keys.order_by(|a, b| b.cmp(&a)), want);
        let one: ByteKeys = [&b"only"[..]].into_iter().collect();
        assert_eq!(one.sorted_unique(), one);
        assert!(ByteKeys::new().sorted_unique().is_empty());
    }
}

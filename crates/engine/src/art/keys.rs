//! Variable-length keys for the radix tree: a batch of byte strings in one
//! buffer, and the byte-comparable encodings that make memcmp order the
//! value order and no key a prefix of another (what a radix tree needs).

use rayon::prelude::*;

/// Byte strings packed in one buffer: key `i` is `data[ends[i-1]..ends[i]]`.
/// (A `Vec<Vec<u8>>` of 10^8 keys would cost a heap block each.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByteKeys {
    data: Vec<u8>,
    ends: Vec<u64>,
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

    /// The keys in byte order with duplicates removed, on all cores.
    pub fn sorted_unique(&self) -> ByteKeys {
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.par_sort_unstable_by(|&a, &b| self.get(a).cmp(self.get(b)));
        order.dedup_by(|a, b| self.get(*a) == self.get(*b));
        let mut out = ByteKeys { data: Vec::with_capacity(self.data.len()), ends: Vec::with_capacity(order.len()) };
        for i in order {
            out.push(self.get(i));
        }
        out
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
}

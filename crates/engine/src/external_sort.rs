//! Sorting more records than fit in memory: records gather in a buffer of
//! at most `memory` bytes, each full buffer is sorted on all cores and
//! written as a run to a [`RunStore`] (PostgreSQL's temporary files in the
//! extension, a `Vec<u8>` in tests), and the runs are merged back in one
//! stream. Past `memory / MIN_READ_BUFFER` runs, groups of runs are first
//! merged into longer runs, so memory stays bounded however many records
//! come. A sort whose records fit in memory touches no store.

use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

/// Where runs go: an append-only byte stream read back at any offset.
pub trait RunStore {
    /// Appends `bytes` at the end of the stream.
    fn append(&mut self, bytes: &[u8]);
    /// Fills `buf` from the stream at `offset` (always within what was
    /// appended).
    fn read_at(&mut self, offset: u64, buf: &mut [u8]);
}

impl RunStore for Vec<u8> {
    fn append(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) {
        let o = offset as usize;
        buf.copy_from_slice(&self[o..o + buf.len()]);
    }
}

/// A fixed-size record with a byte encoding.
pub trait Record: Copy + Ord + Send + Sync {
    const SIZE: usize;
    fn put(&self, out: &mut [u8]);
    fn get(bytes: &[u8]) -> Self;
}

/// (key, TID): what an ordered index sorts.
impl Record for (u64, u64) {
    const SIZE: usize = 16;
    fn put(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.0.to_le_bytes());
        out[8..16].copy_from_slice(&self.1.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        (u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
    }
}

/// A heap TID (or any u64).
impl Record for u64 {
    const SIZE: usize = 8;
    fn put(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        u64::from_le_bytes(b[..8].try_into().unwrap())
    }
}

/// The smallest read buffer per run in a merge: below this the store is
/// read in pieces too small to stream.
pub const MIN_READ_BUFFER: usize = 64 * 1024;
/// Bytes encoded at a time when a run is written.
const WRITE_CHUNK: usize = 256 * 1024;

/// What a sort did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SortStats {
    pub records: u64,
    /// Runs written by the first pass (0: sorted in memory).
    pub runs: usize,
    /// Merge passes that wrote longer runs before the final merge.
    pub extra_passes: usize,
}

pub struct ExternalSorter<T: Record, S: RunStore> {
    buffer: Vec<T>,
    limit: usize,
    store: S,
    end: u64,
    runs: Vec<Range<u64>>,
    memory: usize,
    stats: SortStats,
}

impl<T: Record, S: RunStore> ExternalSorter<T, S> {
    /// A sorter that keeps at most about `memory` bytes of records (at
    /// least two read buffers' worth).
    pub fn new(store: S, memory: usize) -> Self {
        let memory = memory.max(2 * MIN_READ_BUFFER);
        let limit = (memory / std::mem::size_of::<T>().max(1)).max(1);
        ExternalSorter { buffer: Vec::new(), limit, store, end: 0, runs: Vec::new(), memory, stats: SortStats::default() }
    }

    pub fn push(&mut self, x: T) {
        if self.buffer.len() == self.buffer.capacity() {
            if self.buffer.len() >= self.limit {
                self.spill();
            } else {
                // Grow by doubling, but never past the limit.
                let more = self.buffer.len().max(1024).min(self.limit - self.buffer.len());
                self.buffer.reserve_exact(more);
            }
        }
        self.buffer.push(x);
        self.stats.records += 1;
    }

    /// Sorts the buffer and writes it as one run.
    fn spill(&mut self) {
        self.buffer.par_sort_unstable();
        let mut w = RunWriter::new(self.end);
        for x in &self.buffer {
            w.put(x, &mut self.store);
        }
        let run = w.finish(&mut self.store);
        self.end = run.end;
        self.runs.push(run);
        self.stats.runs += 1;
        self.buffer.clear();
    }

    /// Ends the input: the records in order, and what the sort did.
    pub fn finish(mut self) -> (Sorted<T, S>, SortStats) {
        if self.runs.is_empty() {
            self.buffer.par_sort_unstable();
            return (Sorted::Memory(self.buffer.into_iter()), self.stats);
        }
        if !self.buffer.is_empty() {
            self.spill();
        }
        self.buffer = Vec::new();
        let fan_in = (self.memory / MIN_READ_BUFFER).max(2);
        while self.runs.len() > fan_in {
            // Merge the shortest runs first: each pass writes fewer bytes.
            self.runs.sort_by_key(|r| r.end - r.start);
            let group: Vec<Range<u64>> = self.runs.drain(..fan_in).collect();
            let mut w = RunWriter::new(self.end);
            let mut merge = Merge::<T>::new(group, self.memory);
            while let Some(x) = merge.next(&mut self.store) {
                w.put(&x, &mut self.store);
            }
            let run = w.finish(&mut self.store);
            self.end = run.end;
            self.runs.push(run);
            self.stats.extra_passes += 1;
        }
        let merge = Merge::new(std::mem::take(&mut self.runs), self.memory);
        (Sorted::Merge(merge, self.store), self.stats)
    }
}

/// Appends records to the store as one run, WRITE_CHUNK bytes at a time
/// (a spilled buffer or a merge pass's output).
struct RunWriter {
    start: u64,
    written: u64,
    out: Vec<u8>,
}

impl RunWriter {
    fn new(start: u64) -> Self {
        RunWriter { start, written: 0, out: Vec::with_capacity(WRITE_CHUNK) }
    }

    fn put<T: Record>(&mut self, x: &T, store: &mut impl RunStore) {
        let at = self.out.len();
        self.out.resize(at + T::SIZE, 0);
        x.put(&mut self.out[at..]);
        if self.out.len() >= WRITE_CHUNK {
            self.flush(store);
        }
    }

    fn flush(&mut self, store: &mut impl RunStore) {
        store.append(&self.out);
        self.written += self.out.len() as u64;
        self.out.clear();
    }

    /// The run's byte range in the store.
    fn finish(mut self, store: &mut impl RunStore) -> Range<u64> {
        self.flush(store);
        self.start..self.start + self.written
    }
}

/// The sorted records: straight from memory, or merged from the runs.
pub enum Sorted<T: Record, S: RunStore> {
    Memory(std::vec::IntoIter<T>),
    Merge(Merge<T>, S),
}

impl<T: Record, S: RunStore> Iterator for Sorted<T, S> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            Sorted::Memory(it) => it.next(),
            Sorted::Merge(m, store) => m.next(store),
        }
    }
}

/// One run being read: what is left of it in the store, and a buffer.
struct RunReader {
    left: Range<u64>,
    buf: Vec<u8>,
    pos: usize,
}

impl RunReader {
    fn next<T: Record>(&mut self, store: &mut impl RunStore) -> Option<T> {
        if self.pos == self.buf.len() {
            let n = (self.buf.capacity() as u64).min(self.left.end - self.left.start) as usize;
            if n == 0 {
                return None;
            }
            self.buf.resize(n, 0);
            store.read_at(self.left.start, &mut self.buf);
            self.left.start += n as u64;
            self.pos = 0;
        }
        let x = T::get(&self.buf[self.pos..self.pos + T::SIZE]);
        self.pos += T::SIZE;
        Some(x)
    }
}

/// A k-way merge of sorted runs through a binary heap.
pub struct Merge<T: Record> {
    readers: Vec<RunReader>,
    heap: BinaryHeap<Reverse<(T, usize)>>,
    started: bool,
}

impl<T: Record> Merge<T> {
    fn new(runs: Vec<Range<u64>>, memory: usize) -> Self {
        // The memory split between the runs, in whole records.
        let per_run = (memory / runs.len().max(1)).max(MIN_READ_BUFFER) / T::SIZE * T::SIZE;
        let readers = runs.into_iter().map(|left| RunReader { left, buf: Vec::with_capacity(per_run), pos: 0 }).collect();
        Merge { readers, heap: BinaryHeap::new(), started: false }
    }

    fn next(&mut self, store: &mut impl RunStore) -> Option<T> {
        if !self.started {
            self.started = true;
            for (i, r) in self.readers.iter_mut().enumerate() {
                if let Some(x) = r.next(store) {
                    self.heap.push(Reverse((x, i)));
                }
            }
        }
        let Reverse((x, i)) = self.heap.pop()?;
        if let Some(y) = self.readers[i].next(store) {
            self.heap.push(Reverse((y, i)));
        }
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64 as Rng;

    fn sort(input: &[(u64, u64)], memory: usize) -> (Vec<(u64, u64)>, SortStats, usize) {
        let mut s = ExternalSorter::new(Vec::new(), memory);
        for &x in input {
            s.push(x);
        }
        let (sorted, stats) = s.finish();
        let bytes = match &sorted {
            Sorted::Memory(_) => 0,
            Sorted::Merge(_, store) => store.len(),
        };
        (sorted.collect(), stats, bytes)
    }

    fn expected(input: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut v = input.to_vec();
        v.sort_unstable();
        v
    }

    #[test]
    fn small_input_sorts_in_memory() {
        let mut rng = Rng::new(1);
        let input: Vec<(u64, u64)> = (0..1000).map(|i| (rng.next_u64() % 50, i)).collect();
        let (out, stats, bytes) = sort(&input, 1 << 20);
        assert_eq!(out, expected(&input));
        assert_eq!((stats.runs, stats.extra_passes, bytes), (0, 0, 0));
    }

    #[test]
    fn runs_merge_in_one_pass() {
        let mut rng = Rng::new(2);
        // 1 MiB holds 65,536 records and reads 16 runs at once: 850,000
        // records make 13 runs, merged in one pass.
        let input: Vec<(u64, u64)> = (0..850_000).map(|i| (rng.next_u64() % 1000, i)).collect();
        let (out, stats, bytes) = sort(&input, 1 << 20);
        assert_eq!(out, expected(&input));
        assert_eq!((stats.records, stats.runs, stats.extra_passes), (850_000, 13, 0));
        assert_eq!(bytes, 850_000 * 16);
    }

    #[test]
    fn many_runs_merge_in_several_passes() {
        let mut rng = Rng::new(3);
        // Two read buffers of memory: a fan-in of 2, so 37 runs take passes.
        let input: Vec<(u64, u64)> = (0..300_000).map(|i| (rng.next_u64(), i)).collect();
        let (out, stats, _) = sort(&input, 2 * MIN_READ_BUFFER);
        assert_eq!(out, expected(&input));
        assert_eq!(stats.runs, 37);
        assert!(stats.extra_passes >= 35, "{stats:?}");
    }

    #[test]
    fn presorted_reversed_and_equal_inputs() {
        let n = 50_000u64;
        for input in [
            (0..n).map(|i| (i, i)).collect::<Vec<_>>(),
            (0..n).rev().map(|i| (i, i)).collect(),
            (0..n).map(|i| (7, n - i)).collect(),
            Vec::new(),
        ] {
            let (out, _, _) = sort(&input, 2 * MIN_READ_BUFFER);
            assert_eq!(out, expected(&input));
        }
    }
}

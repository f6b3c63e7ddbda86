//! A batch's answers in one buffer, kept by the caller between batches.
//!
//! Chunked searches file each chunk's answers into host memory; a small
//! batch's kernel writes its answers straight into the buffer's own
//! page-locked memory instead (mapped into the device's address space), so
//! that nothing is copied after it: at 10^4 2-d queries on the H100 host,
//! copying 1.6 MB of answers out of a staging buffer took 130-190 us of a
//! ~420 us batch.

use crate::gpu::pipeline::{cast, cast_mut};
use crate::gpu::{Gpu, GpuError, PinnedBuffer, Plain};
use rayon::prelude::*;
use std::mem::{size_of, MaybeUninit};

/// One answer: an object's id and its distance to the query.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pair {
    pub id: u64,
    pub dist: f64,
}

// SAFETY: repr(C), two 8-byte fields, no padding, any bits valid.
unsafe impl Plain for Pair {}

/// A batch's answers: query i's are `query(i)`, in `Answers`' order (kNN
/// nearest first, ties by id; range by id).
#[derive(Default)]
pub struct FlatAnswers {
    /// Query i's answers are `pairs()[span[i].0..span[i].1]`.
    span: Vec<(usize, usize)>,
    host: Vec<Pair>,
    /// Page-locked memory kernels write answers into (as bytes: a kernel
    /// may put counts after them), kept between batches.
    pinned: Option<PinnedBuffer<u8>>,
    /// Pairs of `pinned` holding this batch's answers; None while they
    /// are in `host`.
    pinned_len: Option<usize>,
}

impl FlatAnswers {
    /// Emptied for a new batch (its memory kept).
    pub fn clear(&mut self) {
        self.span.clear();
        self.host.clear();
        self.pinned_len = None;
    }

    pub fn queries(&self) -> usize {
        self.span.len()
    }

    pub fn query(&self, i: usize) -> &[Pair] {
        let (a, b) = self.span[i];
        &self.pairs()[a..b]
    }

    fn pairs(&self) -> &[Pair] {
        match (self.pinned_len, &self.pinned) {
            (Some(n), Some(p)) => cast::<Pair>(p.as_slice(), n),
            _ => &self.host,
        }
    }

    /// A vector per query.
    pub fn nested(&self) -> super::Answers {
        (0..self.queries()).into_par_iter().map(|i| self.query(i).iter().map(|p| (p.id, p.dist)).collect()).collect()
    }

    /// Appended from a vector per query (into host memory).
    pub fn extend_nested(&mut self, answers: &super::Answers) {
        for a in answers {
            self.host.extend(a.iter().map(|&(id, dist)| Pair { id, dist }));
            self.end_at(self.host.len());
        }
    }

    /// The next query's answers end at `end` of the host memory (they
    /// start where the query before ended).
    pub(super) fn end_at(&mut self, end: usize) {
        let start = self.span.last().map_or(0, |s| s.1);
        self.span.push((start, end));
    }

    /// The host memory's answers (to sort a query's in place).
    pub(super) fn host_mut(&mut self) -> &mut [Pair] {
        &mut self.host
    }

    pub(super) fn host_len(&self) -> usize {
        self.host.len()
    }

    /// Appends `src` to the host memory on all cores (first touch of fresh
    /// memory on one thread runs at ~2.5 GB/s on the H100 host).
    pub(super) fn append(&mut self, src: &[Pair]) {
        const PIECE: usize = 1 << 14;
        self.host.reserve(src.len());
        let spare = &mut self.host.spare_capacity_mut()[..src.len()];
        spare.par_chunks_mut(PIECE).zip(src.par_chunks(PIECE)).for_each(|(d, s)| {
            for (d, s) in d.iter_mut().zip(s) {
                *d = MaybeUninit::new(*s);
            }
        });
        let len = self.host.len() + src.len();
        // SAFETY: the first src.len() spare values were written above.
        unsafe { self.host.set_len(len) };
    }

    /// The page-locked memory for a new batch's kernel to write into, at
    /// least `bytes` of it (grown as batches grow; emptied).
    pub(super) fn pinned_for(&mut self, gpu: &Gpu, bytes: usize) -> Result<&mut PinnedBuffer<u8>, GpuError> {
        debug_assert!(self.span.is_empty());
        if self.pinned.as_ref().is_none_or(|p| p.len() < bytes) {
            self.pinned = None;
            self.pinned = Some(PinnedBuffer::alloc(gpu.context(), bytes.next_power_of_two())?);
        }
        Ok(self.pinned.as_mut().expect("allocated above"))
    }

    /// The page-locked memory, as a kernel left it.
    pub(super) fn pinned_bytes(&self) -> &[u8] {
        self.pinned.as_ref().map_or(&[], |p| p.as_slice())
    }

    /// The answers are the first `len` pairs of the page-locked memory,
    /// query i's at `span[i]`.
    pub(super) fn placed(&mut self, len: usize, span: impl IntoIterator<Item = (usize, usize)>) {
        self.pinned_len = Some(len);
        self.span.extend(span);
    }

    /// Query i's answers in the page-locked memory, to sort in place.
    pub(super) fn placed_mut(&mut self, i: usize) -> &mut [Pair] {
        let (a, b) = self.span[i];
        let n = self.pinned_len.expect("answers in page-locked memory");
        let p = self.pinned.as_mut().expect("page-locked memory").as_mut_slice();
        &mut cast_mut::<Pair>(p, n)[a..b]
    }

    /// Query i's answers, placed by the kernel at `span[i]` of the
    /// page-locked memory or (a kernel that did not place them) given
    /// later by `place_rest`.
    pub(super) fn set_span(&mut self, i: usize, span: (usize, usize)) {
        self.span[i] = span;
    }

    /// Appends `src` after the page-locked memory's answers (growing it,
    /// its answers copied, where it lacks room); returns their span.
    pub(super) fn place_rest(&mut self, gpu: &Gpu, src: &[Pair]) -> Result<(usize, usize), GpuError> {
        let len = self.pinned_len.expect("answers in page-locked memory");
        let bytes = (len + src.len()) * size_of::<Pair>();
        if self.pinned.as_ref().is_none_or(|p| p.len() < bytes) {
            let mut grown = PinnedBuffer::alloc(gpu.context(), bytes.next_power_of_two())?;
            if let Some(old) = &self.pinned {
                let used = len * size_of::<Pair>();
                grown.as_mut_slice()[..used].copy_from_slice(&old.as_slice()[..used]);
            }
            self.pinned = Some(grown);
        }
        let p = self.pinned.as_mut().expect("allocated above").as_mut_slice();
        let to = cast_mut::<Pair>(&mut p[len * size_of::<Pair>()..], src.len());
        to.copy_from_slice(src);
        self.pinned_len = Some(len + src.len());
        Ok((len, len + src.len()))
    }
}

impl std::fmt::Debug for FlatAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatAnswers").field("queries", &self.queries()).field("pairs", &self.pairs().len()).finish()
    }
}

//! HB+-tree (Shahvarani & Jacobsen, SIGMOD'16): a B+-tree whose inner
//! nodes (the I-segment) are mirrored on the GPU while the leaves (the
//! L-segment) stay in host memory. A batch of lookups is cut into buckets;
//! the GPU walks every inner level of a bucket and returns leaf references,
//! and the CPU searches those leaves while the GPU works on the next bucket.
//!
//! - `implicit`: the search-only layout, bulk built;
//! - `regular`: the updatable layout (17-line inner nodes of fanout 64,
//!   big leaves of 256 pairs paired with their last-level inner node);
//! - `leaf`: the leaf-step trait, served by in-memory leaves here and by
//!   PostgreSQL pages in the extension.

pub mod implicit;
pub mod leaf;
pub mod line;
pub mod regular;

/// A vector of `n` copies of `value` whose memory the kernel is asked to
/// back with huge pages before it is touched (the paper found both segments
/// fastest on huge pages). Advisory only.
pub(crate) fn huge_vec<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_huge(v.as_ptr(), n * std::mem::size_of::<T>());
    v.resize(n, value);
    v
}

fn advise_huge<T>(ptr: *const T, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        let v = ptr;
        if bytes >= 4 << 20 {
            let page = 4096usize;
            let start = (v as usize).div_ceil(page) * page;
            let end = (v as usize + bytes) / page * page;
            if end > start {
                // SAFETY: advisory call on memory we own; failure is ignored.
                unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
            }
        }
    }
}

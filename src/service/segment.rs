//! Batches larger than a request slot travel in a dynamic shared memory
//! segment the backend creates: the queries, overwritten by the answers
//! once the worker has read them (it copies them out when it takes the
//! request). The backend's mapping belongs to its transaction (an ERROR
//! detaches it), but for a request posted ahead (`create_unowned`), which
//! outlives the call that posted it: the client unmaps that one itself,
//! at the latest at the transaction's end. The worker, which has no
//! resource owner, detaches its own after answering, and the segment goes
//! with the last mapping, so a backend that withdrew leaves nothing
//! behind (notes/005, A15).

use pgrx::pg_sys;

/// The largest segment one request uses; a larger batch is sent in parts
/// (a container's /dev/shm may hold only 64 MB).
pub const MAX_BYTES: usize = 32 << 20;

/// A mapped segment; detached when dropped (never during an ERROR's
/// unwinding: the backend's resource owner does that).
pub struct Segment(*mut pg_sys::dsm_segment);

impl Segment {
    /// A new segment of `bytes` (backend).
    pub fn create(bytes: usize) -> Segment {
        // SAFETY: a backend in a transaction (the segment's resource owner).
        Segment(unsafe { pg_sys::dsm_create(bytes.max(8), 0) })
    }

    /// A new segment of `bytes` that no resource owner holds: mapped until
    /// dropped (or the backend exits), whatever the transaction does.
    pub fn create_unowned(bytes: usize) -> Segment {
        let seg = Segment::create(bytes);
        // SAFETY: a segment this backend just mapped.
        unsafe { pg_sys::dsm_pin_mapping(seg.0) };
        seg
    }

    /// The segment `handle`, or None when its creator is gone (worker).
    pub fn attach(handle: u32) -> Option<Segment> {
        // SAFETY: attaching by handle; NULL when the segment is gone.
        let seg = unsafe { pg_sys::dsm_attach(handle) };
        (!seg.is_null()).then_some(Segment(seg))
    }

    pub fn handle(&self) -> u32 {
        // SAFETY: a mapped segment.
        unsafe { pg_sys::dsm_segment_handle(self.0) }
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping's address and length, while it is mapped;
        // the protocol gives one side at a time the contents.
        unsafe { std::slice::from_raw_parts_mut(pg_sys::dsm_segment_address(self.0).cast::<u8>(), pg_sys::dsm_segment_map_length(self.0)) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: a segment this process mapped and has not detached.
            unsafe { pg_sys::dsm_detach(self.0) };
        }
    }
}

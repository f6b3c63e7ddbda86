//! What this host's memory costs a batch's large buffers (the reason for
//! `gpuindex_engine::alloc`'s kept blocks and their advice once idle): a
//! page's first touch (a fault), `MADV_FREE` and the first write to a page
//! after it, a write to a page kept as it was, memset's bandwidth, and a
//! dependent random read over 1 GB (TLB and cache misses). Three rounds
//! over 512 MB; ns a 4 kB page unless said.

use std::time::Instant;

const LEN: usize = 512 << 20;
const PAGE: usize = 4096;

fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping, checked.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert!(p != libc::MAP_FAILED, "mmap of {len} bytes");
    p.cast()
}

/// ns a page to write one byte of each page of `p`.
fn touch(p: *mut u8, len: usize) -> f64 {
    let t = Instant::now();
    for i in (0..len).step_by(PAGE) {
        // SAFETY: inside the mapping.
        unsafe { p.add(i).write_volatile(1) };
    }
    t.elapsed().as_secs_f64() * 1e9 / (len / PAGE) as f64
}

pub fn run() {
    println!("| round | first touch | kept page rewritten | MADV_FREE | first write after MADV_FREE | munmap | memset GB/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for round in 1..=3 {
        let p = map(LEN);
        let first = touch(p, LEN);
        let t = Instant::now();
        // SAFETY: the mapping's bytes.
        unsafe { std::ptr::write_bytes(p, 7, LEN) };
        let memset = LEN as f64 / t.elapsed().as_secs_f64() / 1e9;
        let kept = touch(p, LEN);
        let t = Instant::now();
        // SAFETY: the mapping, not read until written again.
        unsafe { libc::madvise(p.cast(), LEN, libc::MADV_FREE) };
        let advise = t.elapsed().as_secs_f64() * 1e9 / (LEN / PAGE) as f64;
        let after = touch(p, LEN);
        let t = Instant::now();
        // SAFETY: the mapping, no longer used.
        unsafe { libc::munmap(p.cast(), LEN) };
        let unmap = t.elapsed().as_secs_f64() * 1e9 / (LEN / PAGE) as f64;
        println!("| {round} | {first:.0} | {kept:.0} | {advise:.0} | {after:.0} | {unmap:.0} | {memset:.1} |");
    }
    // A random cycle over 1 GB of u64s, followed 2M steps.
    let n = 1usize << 27;
    let mut next: Vec<u64> = (0..n as u64).collect();
    let mut s: u64 = 88172645463325252;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        next.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let t = Instant::now();
    let mut at = 0u64;
    for _ in 0..2_000_000 {
        at = next[at as usize];
    }
    let ns = t.elapsed().as_secs_f64() * 1e9 / 2e6;
    println!("dependent random read over 1 GB: {ns:.0} ns (ended at {at})");
    for f in ["/sys/kernel/mm/transparent_hugepage/enabled", "/proc/sys/kernel/numa_balancing"] {
        println!("{f}: {}", std::fs::read_to_string(f).unwrap_or_default().trim());
    }
}

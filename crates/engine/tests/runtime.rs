//! The CUDA runtime: detection never panics, `cpu` never touches CUDA, the
//! kernels compile once per process.

mod common;

use gpuindex_engine::executor::{submit, ExecOptions, Policy};
use gpuindex_engine::gpu;
use gpuindex_engine::sorted_array::{LowerBound, SortedKeys};

// One test per process state, run in order in one test function: the
// runtime is process-wide.
#[test]
fn runtime_lifecycle() {
    // The CPU policy does not initialise CUDA.
    let sk = SortedKeys::new((0..100_000).collect()).unwrap();
    let qs: Vec<u64> = (0..50_000).map(|i| i * 3).collect();
    let ran = submit(&ExecOptions { policy: Policy::Cpu, min_gpu_batch: 0 }, &LowerBound::new(&sk), &qs).unwrap();
    assert_eq!(ran.output[10], 30);
    assert!(!gpu::initialised(), "the cpu policy touched CUDA");

    // Detection returns, whatever the machine has.
    let first = gpu::gpu();
    let second = gpu::gpu();
    assert_eq!(first.is_ok(), second.is_ok());
    let Some(g) = common::gpu_or_skip("runtime_lifecycle") else {
        let e = first.err().unwrap();
        assert!(matches!(e, gpu::GpuError::Unavailable(_)), "{e:?}");
        assert!(!e.hint().is_empty());
        return;
    };
    let info = g.info();
    assert!(info.total_memory > 0 && info.multiprocessors > 0 && !info.name.is_empty());
    assert!(info.compute_capability >= gpu::MIN_COMPUTE_CAPABILITY);
    g.compile_all().unwrap();
    let compiled = g.compiled();
    assert_eq!(compiled.len(), gpu::kernels::ALL.len());
    g.compile_all().unwrap();
    assert_eq!(g.compiled().len(), compiled.len(), "kernels compiled twice");
    eprintln!("{info:?}; compiled: {compiled:?}");

    // Device memory round trip, and an allocation that cannot succeed.
    let data: Vec<u64> = (0..1000).map(|i| i * i).collect();
    assert_eq!(g.upload(&data).unwrap().download().unwrap(), data);
    let (_, total) = g.memory().unwrap();
    match g.alloc::<u8>(total * 4) {
        Err(gpu::GpuError::OutOfMemory { requested, .. }) => assert_eq!(requested, total * 4),
        other => panic!("expected OutOfMemory, got {:?}", other.map(|b| b.len())),
    }
}

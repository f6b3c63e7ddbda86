//! gpuindex-bench: prints tables of queries/s for each structure, CPU (all
//! cores) and GPU in the same run, checking that both give the same answers.
//!
//!   gpuindex-bench [sorted] [hbtree] [leafstep] [gpics] [gpics-knn] [gts] [gts-build] [gts-small] [words] [pgm] [lastmile] [heap-order] [art] [pages] [--n LIST] [--batch LIST] [--reps 5] [--dim 128] [--set NAME]
//!
//! sorted: n = 1e6,1e7,1e8, batches 1e3..1e7 by default;
//! hbtree: n = 2^23..2^28, one batch of 2^24 hits by default;
//! gpics: 16M points, batches of 1K..4M queries of each kind by default;
//! gpics-knn: the same builds and kNN rows only;
//! gts: 1M vectors of 128 floats, clustered and uniform, batches of 1..1e5.
//! gts-build: the tree built on all cores and on the GPU, n = 1e5,1e6,1e7.
//! gts-small: the bounded brute force on the GPU for small batches (the service's epochs).
//! words: a dictionary's words by edit distance (--set FILE), batches of 1..1e4;
//! pgm: the G-Learned index, n = 1e7,1e8 keys of four sets (--set gaps,uniform,sequential,zipf), 1e7 queries.
//! lastmile: the host's side alone with the keys in host memory (PGM's last mile in
//!   random and in predicted order, the HB+-tree's leaf step, a stream read), n = 1e8,2^28, batches 1e7,2^24.
//! art: CuART, n = 1e7 string keys of four sets (--set uuid,urls,words,random), 1e7 queries.
//! pages: what the host's memory costs a batch's buffers (page faults, MADV_FREE, bandwidth).
//!
//! Without a GPU the GPU columns read "-" (and GPUINDEX_REQUIRE_GPU=1 makes
//! that a failure).

mod art;
mod gpics;
mod gts;
mod hbtree;
mod heaporder;
mod lastmile;
mod pages;
mod pgm;
mod sorted;
mod util;
mod words;

use gpuindex_engine::gpu;

pub struct Args {
    pub n: Vec<usize>,
    pub batch: Vec<usize>,
    /// Whether --n / --batch were given (benchmarks have their own defaults).
    pub n_given: bool,
    pub batch_given: bool,
    pub reps: usize,
    /// Vector dimension (gts).
    pub dim: usize,
    /// A data set by name (gts: clustered, uniform).
    pub set: Option<String>,
    pub what: Vec<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        n: util::parse_sizes("1e6,1e7,1e8"),
        batch: util::parse_sizes("1e3,1e4,1e5,1e6,1e7"),
        n_given: false,
        batch_given: false,
        reps: 5,
        dim: 128,
        set: None,
        what: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--n" => {
                args.n = util::parse_sizes(&value());
                args.n_given = true;
            }
            "--batch" => {
                args.batch = util::parse_sizes(&value());
                args.batch_given = true;
            }
            "--reps" => args.reps = value().parse().expect("--reps N"),
            "--dim" => args.dim = value().parse().expect("--dim N"),
            "--set" => args.set = Some(value()),
            "-h" | "--help" => {
                println!("usage: gpuindex-bench [sorted] [hbtree] [leafstep] [gpics] [gpics-knn] [gts] [gts-build] [gts-small] [words] [pgm] [lastmile] [heap-order] [art] [pages] [--n LIST] [--batch LIST] [--reps N] [--dim N] [--set NAME]");
                std::process::exit(0);
            }
            other => args.what.push(other.to_string()),
        }
    }
    if args.what.is_empty() {
        args.what.push("sorted".into());
    }
    args
}

fn main() {
    let args = parse_args();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("# gpuindex-bench");
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_default();
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    println!(
        "\nCPU: {model}, {cpus} hardware threads, rayon pool of {}; transparent huge pages: {}",
        rayon::current_num_threads(),
        thp.trim()
    );
    let g = match gpu::gpu() {
        Ok(g) => {
            let i = g.info();
            println!(
                "GPU: {} (sm_{}{}, {} SMs, {} MiB), driver CUDA {}, NVRTC {}.{}",
                i.name,
                i.compute_capability.0,
                i.compute_capability.1,
                i.multiprocessors,
                i.total_memory >> 20,
                gpu::format_cuda_version(i.driver_version),
                i.nvrtc_version.0,
                i.nvrtc_version.1
            );
            if let Err(e) = g.compile_all() {
                eprintln!("kernels failed to compile: {e}");
                std::process::exit(1);
            }
            for c in g.compiled() {
                println!("kernel {}: compiled in {:.1} ms (first use in this process)", c.kernel, c.millis);
            }
            Some(g)
        }
        Err(e) => {
            println!("GPU: none ({e})");
            if gpuindex_engine::gpu_required() {
                eprintln!("GPUINDEX_REQUIRE_GPU=1 but no GPU is usable");
                std::process::exit(1);
            }
            None
        }
    };
    for w in &args.what {
        match w.as_str() {
            "sorted" => sorted::run(&args, g.as_deref()),
            "hbtree" => hbtree::run(&args, g.as_deref()),
            "leafstep" => hbtree::leafstep(&args, g.as_deref()),
            "gpics" => gpics::run(&args, g.as_deref(), false),
            "gpics-knn" => gpics::run(&args, g.as_deref(), true),
            "gts" => gts::run(&args, g.as_deref()),
            "gts-build" => gts::build_bench(&args, g.as_deref()),
            "gts-small" => gts::small_bench(&args, g.as_deref()),
            "words" => words::run(&args, g.as_deref()),
            "pgm" => pgm::run(&args, g.as_deref()),
            "lastmile" => lastmile::run(&args),
            "heap-order" => heaporder::run(&args),
            "art" => art::run(&args, g.as_deref()),
            "pages" => pages::run(),
            other => {
                eprintln!("unknown benchmark {other}");
                std::process::exit(2);
            }
        }
    }
}

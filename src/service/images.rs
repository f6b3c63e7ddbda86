//! Index images in the service: how a backend ships one (a file in the
//! data directory: the service has no database connection to read pages
//! with, and a file is not bounded by /dev/shm as dynamic shared memory
//! is), and the service's store of them (one copy of each, on the host
//! and the device, released least recently used first past
//! `gpuindex.service_memory`, and when a newer image of the same index
//! arrives).

use super::served::Served;
use super::shmem::{ImageKey, ImageRow};
use crate::am::{gpu_art, gpu_btree, gpu_learned, gpu_metric, gpu_spatial};
use gpuindex_engine::gpics::{Params, Points, QuadTree};
use gpuindex_engine::gpu::Gpu;
use gpuindex_engine::gts::search::Objects;
use gpuindex_engine::gts::{Metric, Node, Shape, Vectors};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The directory of shipped images, in the data directory (every
/// PostgreSQL process runs there).
pub const DIR: &str = "pg_gpuindex";
const METRIC: &[u8; 8] = b"GPUIMG01";
const SPATIAL: &[u8; 8] = b"GPUSPT01";
const BTREE: &[u8; 8] = b"GPUBTR01";
const ART: &[u8; 8] = b"GPUART01";
const LEARNED: &[u8; 8] = b"GPUPGM01";

/// Where this backend ships an image.
pub fn ship_path(key: &ImageKey) -> PathBuf {
    Path::new(DIR).join(format!("{}.{}.{}.{}.image", std::process::id(), key.database, key.index, key.generation))
}

fn put<T: Copy>(w: &mut impl Write, v: &[T]) -> std::io::Result<()> {
    w.write_all(&(v.len() as u64).to_le_bytes())?;
    // SAFETY: plain-data slices (f32, u64, f64, repr(C) Node) as bytes.
    w.write_all(unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) })
}

/// Reads a slice `put` wrote; `T` is plain data (all-zero bytes and any
/// bytes written from a `T` are valid).
fn get<T: Copy>(r: &mut impl Read) -> std::io::Result<Vec<T>> {
    let mut n = [0u8; 8];
    r.read_exact(&mut n)?;
    let n = u64::from_le_bytes(n) as usize;
    // SAFETY: plain data, as above.
    let mut v = vec![unsafe { std::mem::zeroed::<T>() }; n];
    // SAFETY: filled byte for byte from what `put` wrote of the same type.
    r.read_exact(unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v.as_slice())) })?;
    Ok(v)
}

fn create(path: &Path, magic: &[u8; 8]) -> std::io::Result<BufWriter<std::fs::File>> {
    std::fs::create_dir_all(DIR)?;
    let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    w.write_all(magic)?;
    Ok(w)
}

/// Writes gpu_metric's `img` to `path`.
pub fn write_metric(path: &Path, img: &gpu_metric::image::Image) -> std::io::Result<()> {
    let mut w = create(path, METRIC)?;
    let s = &img.shape;
    put(&mut w, &[s.metric as u8 as u64, s.fanout as u64, s.height as u64, s.dim as u64, img.objects.v.dim as u64])?;
    put(&mut w, &s.nodes)?;
    put(&mut w, &s.pivots)?;
    put(&mut w, &img.objects.v.data)?;
    put(&mut w, &img.objects.v.ids)?;
    put(&mut w, &img.objects.pdist)?;
    w.flush()
}

/// Writes gpu_spatial's `img` to `path`.
pub fn write_spatial(path: &Path, img: &gpu_spatial::image::Image) -> std::io::Result<()> {
    let mut w = create(path, SPATIAL)?;
    let t = &img.tree;
    put(&mut w, &[t.params.mc as u64, t.params.mh as u64])?;
    put(&mut w, &t.nodes)?;
    for p in [&t.pts, &t.odd] {
        put(&mut w, &p.x)?;
        put(&mut w, &p.y)?;
        put(&mut w, &p.id)?;
    }
    w.flush()
}

/// Writes gpu_btree's mirror as its lowest inner level: each leaf's high
/// key and block.
pub fn write_btree(path: &Path, highs: &[u64], blocks: &[u32]) -> std::io::Result<()> {
    let mut w = create(path, BTREE)?;
    put(&mut w, highs)?;
    put(&mut w, blocks)?;
    w.flush()
}

/// Writes gpu_art's mirror as its lowest inner level: the leaves' high
/// keys, then each one's leaf block and the block past them.
pub fn write_art(path: &Path, keys: &gpuindex_engine::art::ByteKeys, blocks: &[u32]) -> std::io::Result<()> {
    let mut w = create(path, ART)?;
    let (data, ends) = keys.parts();
    put(&mut w, data)?;
    put(&mut w, ends)?;
    put(&mut w, blocks)?;
    w.flush()
}

/// Writes gpu_learned's run model.
pub fn write_learned(path: &Path, pgm: &gpuindex_engine::pgm::Pgm) -> std::io::Result<()> {
    let mut w = create(path, LEARNED)?;
    put(&mut w, &[pgm.eps as u64, pgm.eps_inner as u64, pgm.n as u64])?;
    put(&mut w, &pgm.first)?;
    put(&mut w, &pgm.slope)?;
    put(&mut w, &pgm.intercept)?;
    let levels: Vec<u64> = pgm.levels.iter().flat_map(|l| [l.offset as u64, l.len as u64]).collect();
    put(&mut w, &levels)?;
    w.flush()
}

/// Reads what a `write_*` function wrote.
fn read(path: &Path, key: &ImageKey) -> std::io::Result<Served> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
    let mut r = BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic == SPATIAL {
        let h: Vec<u64> = get(&mut r)?;
        let [mc, mh] = h[..] else { return Err(bad("short header")) };
        let nodes: Vec<gpuindex_engine::gpics::tree::Node> = get(&mut r)?;
        let mut points = || -> std::io::Result<Points> { Ok(Points { x: get(&mut r)?, y: get(&mut r)?, id: get(&mut r)? }) };
        let (pts, odd) = (points()?, points()?);
        if [&pts, &odd].iter().any(|p| p.x.len() != p.id.len() || p.y.len() != p.id.len())
            || nodes.iter().any(|n| n.is_leaf() && n.start as usize + n.count as usize > pts.len())
        {
            return Err(bad("inconsistent sizes"));
        }
        let tree = QuadTree::from_parts(Params { mc: mc as usize, mh: mh as usize }, nodes, pts, odd);
        return Ok(Served::Spatial(gpu_spatial::image::Image::new(key.generation, key.vacuums, tree)));
    }
    if &magic == BTREE {
        let highs: Vec<u64> = get(&mut r)?;
        let blocks: Vec<u32> = get(&mut r)?;
        if highs.is_empty() || highs.len() != blocks.len() || highs.windows(2).any(|w| w[0] > w[1]) {
            return Err(bad("inconsistent sizes"));
        }
        let inner = gpuindex_engine::hbtree::implicit::ImplicitInner::build(&highs);
        return Ok(Served::Btree(gpu_btree::mirror::Mirror { generation: key.generation, blocks, inner }));
    }
    if &magic == ART {
        let data: Vec<u8> = get(&mut r)?;
        let ends: Vec<u64> = get(&mut r)?;
        let blocks: Vec<u32> = get(&mut r)?;
        if blocks.len() != ends.len() + 1 || ends.windows(2).any(|w| w[0] > w[1]) || ends.last().is_some_and(|&e| e as usize != data.len())
        {
            return Err(bad("inconsistent sizes"));
        }
        let mut keys = gpuindex_engine::art::ByteKeys::new();
        let mut at = 0;
        for &e in &ends {
            keys.push(&data[at..e as usize]);
            at = e as usize;
        }
        if keys.iter().zip(keys.iter().skip(1)).any(|(a, b)| a >= b) {
            return Err(bad("keys out of order"));
        }
        return Ok(Served::Art(Box::new(gpu_art::mirror::Mirror::new(key.generation, &keys, blocks))));
    }
    if &magic == LEARNED {
        use gpuindex_engine::pgm::{Level, Pgm};
        let h: Vec<u64> = get(&mut r)?;
        let [eps, eps_inner, n] = h[..] else { return Err(bad("short header")) };
        let (first, slope, intercept): (Vec<u64>, Vec<f64>, Vec<f64>) = (get(&mut r)?, get(&mut r)?, get(&mut r)?);
        let levels: Vec<u64> = get(&mut r)?;
        let levels: Vec<Level> = levels.chunks_exact(2).map(|l| Level { offset: l[0] as usize, len: l[1] as usize }).collect();
        let sane = slope.len() == first.len()
            && intercept.len() == first.len()
            && levels.iter().all(|l| l.offset.checked_add(l.len).is_some_and(|e| e <= first.len()))
            && levels.last().is_none_or(|l| l.len == 1)
            && (n == 0) == levels.is_empty();
        if !sane {
            return Err(bad("inconsistent sizes"));
        }
        let pgm = Pgm { eps: eps as usize, eps_inner: eps_inner as usize, n: n as usize, first, slope, intercept, levels };
        return Ok(Served::Learned(Box::new(gpu_learned::service::Model::new(pgm))));
    }
    if &magic != METRIC {
        return Err(bad("not an image"));
    }
    let h: Vec<u64> = get(&mut r)?;
    let [metric, fanout, height, dim, vdim] = h[..] else { return Err(bad("short header")) };
    let metric = Metric::from_code(metric as u8).ok_or_else(|| bad("unknown metric"))?;
    let nodes: Vec<Node> = get(&mut r)?;
    let pivots: Vec<f32> = get(&mut r)?;
    let data: Vec<f32> = get(&mut r)?;
    let ids: Vec<u64> = get(&mut r)?;
    let pdist: Vec<f64> = get(&mut r)?;
    if nodes.is_empty() || ids.len() != pdist.len() || data.len() != ids.len() * vdim as usize {
        return Err(bad("inconsistent sizes"));
    }
    let shape = Shape { metric, fanout: fanout as usize, height: height as usize, dim: dim as usize, nodes, pivots };
    let objects = Objects { v: Vectors { dim: vdim as usize, data, ids }, pdist };
    Ok(Served::Metric(gpu_metric::image::Image::new(key.generation, key.vacuums, shape, objects)))
}

struct Held {
    image: Arc<Served>,
    used: u64,
    queries: u64,
}

/// How long another backend may take to ship an image before a new
/// requester is asked to (its shipper may have been cancelled).
const SHIPPING_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Store {
    held: HashMap<ImageKey, Held>,
    /// Images a backend was asked to ship: its pid, since when.
    shipping: HashMap<ImageKey, (i32, Instant)>,
    /// Images that could not be loaded, and why: asked again, they fail at
    /// once rather than being shipped again.
    refused: HashMap<ImageKey, String>,
    /// Range answers that outgrew their request's room, kept for the
    /// requester's ask again (by its pid and the image; the same queries,
    /// compared bit for bit) so that it is not searched twice.
    answers: HashMap<(i32, ImageKey), (Vec<f32>, Kept, Instant)>,
    clock: u64,
}

/// A kept range answer: its rows per query, and whether the GPU found
/// them.
pub type Kept = (super::served::Rows, bool);

/// How long a held answer waits for its ask again, and how many wait.
const HELD_FOR: Duration = Duration::from_secs(10);
const HELD_MOST: usize = 8;

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

impl Store {
    /// The image of `key`, marked used by `queries` more queries.
    pub fn get(&mut self, key: &ImageKey, queries: usize) -> Option<Arc<Served>> {
        self.clock += 1;
        let h = self.held.get_mut(key)?;
        h.used = self.clock;
        h.queries += queries as u64;
        Some(h.image.clone())
    }

    /// Keeps the range answer to `pid`'s `queries` for its ask again
    /// (`held_answer`).
    pub fn hold_answer(&mut self, pid: i32, key: ImageKey, queries: &[f32], kept: Kept) {
        self.answers.retain(|_, (_, _, at)| at.elapsed() < HELD_FOR);
        while self.answers.len() >= HELD_MOST {
            let oldest = *self.answers.iter().min_by_key(|(_, (_, _, at))| *at).map(|(k, _)| k).expect("not empty");
            self.answers.remove(&oldest);
        }
        self.answers.insert((pid, key), (queries.to_vec(), kept, Instant::now()));
    }

    /// The answer kept for `pid`'s request of the same `queries`, if it
    /// fits `room` rows now (it is given once).
    pub fn held_answer(&mut self, pid: i32, key: ImageKey, queries: &[f32], room: usize) -> Option<Kept> {
        let same = |q: &[f32]| q.len() == queries.len() && q.iter().zip(queries).all(|(a, b)| a.to_bits() == b.to_bits());
        let fits =
            self.answers.get(&(pid, key)).is_some_and(|(q, (rows, _), at)| at.elapsed() < HELD_FOR && same(q) && rows.ids.len() <= room);
        fits.then(|| self.answers.remove(&(pid, key)).expect("found above").1)
    }

    /// Why the image of `key` was refused, if it was.
    pub fn refused(&self, key: &ImageKey) -> Option<&str> {
        self.refused.get(key).map(String::as_str)
    }

    /// Whether `pid` should ship the missing image of `key` (true), or
    /// another backend is shipping it (false).
    pub fn ask_to_ship(&mut self, key: &ImageKey, pid: i32) -> bool {
        if let Some(&(by, since)) = self.shipping.get(key) {
            if by != pid && alive(by) && since.elapsed() < SHIPPING_TIMEOUT {
                return false;
            }
        }
        self.shipping.insert(*key, (pid, Instant::now()));
        true
    }

    /// Loads the image `path` holds as `key` (and removes the file),
    /// uploading it to `gpu` if given, within `budget` bytes.
    pub fn load(&mut self, key: &ImageKey, path: &Path, gpu: Option<&Gpu>, budget: usize) -> Result<(), String> {
        self.shipping.remove(key);
        let loaded = self.try_load(key, path, gpu, budget);
        if let Err(e) = &loaded {
            self.refused.retain(|k, _| (k.database, k.index) != (key.database, key.index));
            self.refused.insert(*key, e.clone());
        }
        loaded
    }

    fn try_load(&mut self, key: &ImageKey, path: &Path, gpu: Option<&Gpu>, budget: usize) -> Result<(), String> {
        let read = read(path, key);
        let _ = std::fs::remove_file(path);
        let image = read.map_err(|e| format!("could not read the shipped image: {e}"))?;
        // Older images of the same index are never asked for again.
        self.held.retain(|k, _| (k.database, k.index) != (key.database, key.index));
        let bytes = image.host_bytes();
        if bytes > budget {
            return Err(format!("the image takes {} MB, more than gpuindex.service_memory = {} MB", bytes >> 20, budget >> 20));
        }
        while self.host_bytes() + bytes > budget {
            let oldest = self.held.iter().min_by_key(|(_, h)| h.used).map(|(k, _)| *k).expect("over budget only when holding some");
            self.held.remove(&oldest);
        }
        if let Some(g) = gpu {
            image.upload(g).map_err(|e| format!("could not upload the image: {e}"))?;
        }
        self.clock += 1;
        self.held.insert(*key, Held { image: Arc::new(image), used: self.clock, queries: 0 });
        Ok(())
    }

    /// Releases the images of a dropped index; whether there were any.
    pub fn release(&mut self, database: u32, index: u32) -> bool {
        let before = self.held.len();
        self.held.retain(|k, _| (k.database, k.index) != (database, index));
        self.refused.retain(|k, _| (k.database, k.index) != (database, index));
        self.held.len() != before
    }

    fn host_bytes(&self) -> usize {
        self.held.values().map(|h| h.image.host_bytes()).sum()
    }

    /// What `gpuindex_service_images()` lists.
    pub fn rows(&self) -> Vec<ImageRow> {
        let mut rows: Vec<ImageRow> = self
            .held
            .iter()
            .map(|(k, h)| ImageRow {
                key: *k,
                host_bytes: h.image.host_bytes() as u64,
                device_bytes: h.image.device_bytes() as u64,
                queries: h.queries,
            })
            .collect();
        rows.sort_by_key(|r| (r.key.database, r.key.index));
        rows
    }
}

/// Removes images a previous run of the service left unread.
pub fn clear_shipped() {
    if let Ok(dir) = std::fs::read_dir(DIR) {
        for e in dir.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

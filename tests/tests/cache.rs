//! The per-backend cache of index images: a backend lists what it holds
//! (`gpuindex_cached_images()`), and an index dropped, rewritten or
//! truncated by another backend has its images (host and device) released
//! at this backend's next command.

use gpuindex_tests::{connect, server_has_gpu};
use postgres::Client;

const DB: &str = "gpuindex_it_cache";

/// (index, kind, host bytes, device bytes) this backend holds for `table`'s indexes.
fn held(c: &mut Client, table: &str) -> Vec<(String, String, i64, i64)> {
    c.query(
        "SELECT index::text, kind, host_bytes, device_bytes FROM gpuindex_cached_images() i
          WHERE index::oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = $1::text::regclass)
             OR NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = i.index)
          ORDER BY 1, 2",
        &[&table],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn use_indexes(c: &mut Client) {
    c.query("SELECT count(*) FROM gpu_spatial_range('ca_p', ARRAY[box '(0,0),(50,50)'])", &[]).unwrap();
    c.query("SELECT count(*) FROM gpu_btree_probe('ca_k', ARRAY(SELECT generate_series(1, 5000))::int8[])", &[]).unwrap();
    // A single lookup descends from the cached root.
    c.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM ca WHERE k = 7; RESET enable_seqscan; RESET enable_bitmapscan").unwrap();
}

#[test]
fn images_of_dropped_and_rewritten_indexes_are_released() {
    let mut a = connect(DB);
    let mut b = connect(DB);
    let gpu = server_has_gpu(&mut a);
    // (The session's own images: with a GPU service running, auto would
    // ship them to it and drop this backend's copies.)
    a.batch_execute(
        "SET client_min_messages = warning; SET gpuindex.gpu_min_batch = 1; SET gpuindex.service = off;
         DROP TABLE IF EXISTS ca;
         CREATE TABLE ca (k int8, p point);
         INSERT INTO ca SELECT g, point(g % 1000 * 0.1, g / 1000 * 0.1) FROM generate_series(1, 200000) g;
         CREATE INDEX ca_k ON ca USING gpu_btree (k);
         CREATE INDEX ca_p ON ca USING gpu_spatial (p);",
    )
    .unwrap();
    use_indexes(&mut a);
    let before = held(&mut a, "ca");
    let kinds: Vec<(&str, &str)> = before.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
    for want in [("ca_k", "hb+ mirror"), ("ca_k", "root"), ("ca_p", "nodes"), ("ca_p", "points")] {
        assert!(kinds.contains(&want), "{want:?} not cached: {before:?}");
    }
    let points = before.iter().find(|r| r.1 == "points").unwrap();
    assert!(points.2 >= 200_000 * 24, "host bytes of the points image: {points:?}");
    if gpu {
        assert!(points.3 >= 200_000 * 24, "device bytes of the points image: {points:?}");
    }

    // Another backend drops one index and rewrites the other.
    b.batch_execute("DROP INDEX ca_p; REINDEX INDEX ca_k;").unwrap();
    a.batch_execute("SELECT 1").unwrap();
    assert_eq!(held(&mut a, "ca"), vec![], "images kept after DROP INDEX / REINDEX in another backend");

    // Rebuilt on use; TRUNCATE (a new file) releases them too.
    b.batch_execute("CREATE INDEX ca_p ON ca USING gpu_spatial (p)").unwrap();
    use_indexes(&mut a);
    assert_eq!(held(&mut a, "ca").len(), 4);
    b.batch_execute("TRUNCATE ca").unwrap();
    a.batch_execute("SELECT 1").unwrap();
    assert_eq!(held(&mut a, "ca"), vec![], "images kept after TRUNCATE in another backend");
    a.batch_execute("DROP TABLE ca").unwrap();
}

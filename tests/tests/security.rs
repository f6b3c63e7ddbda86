//! The privilege guard on random data: for a role under a row-level
//! security policy (one with a subquery), every batch function returns
//! exactly the (query position, TID) pairs, and kNN exactly the distances,
//! that the same query returns through a normal SELECT by that role;
//! before and after deletes, HOT and non-HOT updates, inserts into the
//! delta and VACUUM. TIDs are compared directly (joining them back to the
//! table would apply the policy again and hide a leak). On a server with a
//! GPU, batches of every size run there.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{connect, error_of};
use postgres::Client;

const DB: &str = "gpuindex_it_security";
const ROLE: &str = "gpuindex_it_rls";

fn unit(rng: &mut SplitMix64) -> f64 {
    rng.next_u64() as f64 / u64::MAX as f64
}

/// Clustered points on a 0.25 grid (duplicates and border hits).
fn point(rng: &mut SplitMix64) -> (f64, f64) {
    let centres = [(10.0, 10.0), (30.0, 12.0), (25.0, 40.0)];
    let (cx, cy) = centres[rng.below(3) as usize];
    let c = |rng: &mut SplitMix64, v: f64| v + (rng.below(41) as f64 - 20.0) * 0.25;
    (c(rng, cx), c(rng, cy))
}

/// Sorted (position, TID) pairs.
fn pairs(c: &mut Client, sql: &str) -> Vec<(i64, String)> {
    gpuindex_tests::sorted_pairs(c, sql)
}

use gpuindex_tests::sql_array as array;

fn setup(c: &mut Client, rng: &mut SplitMix64) {
    c.batch_execute(&format!(
        "SET client_min_messages = warning;
         DO $$ BEGIN CREATE ROLE {ROLE}; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
         DROP TABLE IF EXISTS sec_t, sec_allowed, sec_outer;
         CREATE TABLE sec_t (id int, k int8, p point) WITH (fillfactor = 70);
         CREATE TABLE sec_allowed (id int);
         CREATE TABLE sec_outer (id int, q point);"
    ))
    .unwrap();
    let rows: Vec<String> = (0..20_000)
        .map(|i| {
            // Keys: heavy duplicates of small values, a long tail.
            let k = (rng.below(300) * rng.below(300)) as i64 - 5000;
            let (x, y) = point(rng);
            format!("({i}, {k}, point({x:?}, {y:?}))")
        })
        .collect();
    for chunk in rows.chunks(2000) {
        c.batch_execute(&format!("INSERT INTO sec_t VALUES {}", chunk.join(","))).unwrap();
    }
    let allowed: Vec<String> = (0..20_000).filter(|_| rng.below(10) < 3).map(|i| format!("({i})")).collect();
    c.batch_execute(&format!("INSERT INTO sec_allowed VALUES {}", allowed.join(","))).unwrap();
    let outer: Vec<String> = (0..300)
        .map(|i| {
            let (x, y) = point(rng);
            format!("({i}, point({x:?}, {y:?}))")
        })
        .collect();
    c.batch_execute(&format!("INSERT INTO sec_outer VALUES {}", outer.join(","))).unwrap();
    c.batch_execute(&format!(
        "CREATE INDEX sec_t_k ON sec_t USING gpu_btree (k);
         CREATE INDEX sec_t_kl ON sec_t USING gpu_learned (k);
         CREATE INDEX sec_t_p ON sec_t USING gpu_spatial (p) WITH (leaf_capacity = 128, delta_limit = 4);
         ALTER TABLE sec_t ENABLE ROW LEVEL SECURITY;
         CREATE POLICY sec_some ON sec_t FOR SELECT TO {ROLE} USING (id % 5 <> 0 AND id IN (SELECT id FROM sec_allowed));
         GRANT SELECT ON sec_t, sec_allowed, sec_outer TO {ROLE};
         ANALYZE sec_t;"
    ))
    .unwrap();
}

/// Every function against the same query by SELECT, as the role.
fn compare_as_role(c: &mut Client, rng: &mut SplitMix64, n: usize) {
    let keys: Vec<String> = (0..n).map(|_| ((rng.below(300) * rng.below(300)) as i64 - 5000).to_string()).collect();
    let qs: Vec<(f64, f64)> = (0..n).map(|_| point(rng)).collect();
    let boxes: Vec<String> = qs
        .iter()
        .map(|(x, y)| format!("box(point({x:?},{y:?}), point({:?},{:?}))", x + rng.below(8) as f64 * 0.25, y + rng.below(8) as f64 * 0.25))
        .collect();
    let circles: Vec<String> = qs.iter().map(|(x, y)| format!("circle(point({x:?},{y:?}), {:?})", unit(rng) * 2.0)).collect();
    let centres: Vec<String> = qs.iter().map(|(x, y)| format!("point({x:?},{y:?})")).collect();
    let cases = [
        (
            "gpu_btree_probe",
            format!("SELECT ord, ctid::text FROM gpu_btree_probe('sec_t_k', {})", array(&keys, "int8")),
            format!("SELECT q.ord, t.ctid::text FROM unnest({}) WITH ORDINALITY q(k, ord) JOIN sec_t t ON t.k = q.k", array(&keys, "int8")),
        ),
        (
            "gpu_learned_probe",
            format!("SELECT ord, ctid::text FROM gpu_learned_probe('sec_t_kl', {})", array(&keys, "int8")),
            format!("SELECT q.ord, t.ctid::text FROM unnest({}) WITH ORDINALITY q(k, ord) JOIN sec_t t ON t.k = q.k", array(&keys, "int8")),
        ),
        (
            "gpu_spatial_range",
            format!("SELECT ord, ctid::text FROM gpu_spatial_range('sec_t_p', {})", array(&boxes, "box")),
            format!(
                "SELECT q.ord, t.ctid::text FROM unnest({}) WITH ORDINALITY q(b, ord) JOIN sec_t t ON t.p <@ q.b",
                array(&boxes, "box")
            ),
        ),
        (
            "gpu_spatial_within (circles)",
            format!("SELECT ord, ctid::text FROM gpu_spatial_within('sec_t_p', {})", array(&circles, "circle")),
            format!(
                "SELECT q.ord, t.ctid::text FROM unnest({}) WITH ORDINALITY q(c, ord) JOIN sec_t t ON t.p <@ q.c",
                array(&circles, "circle")
            ),
        ),
        (
            "gpu_spatial_within (points)",
            format!("SELECT ord, ctid::text FROM gpu_spatial_within('sec_t_p', {}, 0.6)", array(&centres, "point")),
            format!(
                "SELECT q.ord, t.ctid::text FROM unnest({}) WITH ORDINALITY q(c, ord) JOIN sec_t t ON t.p <@ circle(q.c, 0.6)",
                array(&centres, "point")
            ),
        ),
        (
            "gpu_spatial_join",
            "SELECT o.id::int8, j.inner_ctid::text FROM gpu_spatial_join('sec_t_p', 'sec_outer', 'q', within => 0.5, batch => 64) j
             JOIN sec_outer o ON o.ctid = j.outer_ctid"
                .to_string(),
            "SELECT o.id::int8, t.ctid::text FROM sec_outer o JOIN sec_t t ON t.p <@ circle(o.q, 0.5)".to_string(),
        ),
    ];
    // Joined back by ctid, the join runs the call's search itself and the
    // function's policy filter is not applied: the table's policies among
    // the join's quals must hide the same rows.
    let joined = [
        (
            "gpu_btree_probe joined back",
            format!(
                "SELECT p.ord, p.ctid::text FROM gpu_btree_probe('sec_t_k', {}) p JOIN sec_t t ON t.ctid = p.ctid",
                array(&keys, "int8")
            ),
            cases[0].2.clone(),
        ),
        (
            "gpuindex_search joined back",
            format!(
                "SELECT p.ord, p.ctid::text FROM gpuindex_search('sec_t_p', '<@(point,box)', {}) p JOIN sec_t t ON t.ctid = p.ctid",
                array(&boxes, "box")
            ),
            cases[2].2.clone(),
        ),
    ];
    // (Those run with the planner's own joins off: GpuIndexJoin then.)
    let force = |c: &mut Client, on: bool| {
        let v = if on { "off" } else { "on" };
        c.batch_execute(&format!("SET enable_hashjoin = {v}; SET enable_mergejoin = {v}; SET enable_nestloop = {v}")).unwrap();
    };
    c.batch_execute(&format!("SET ROLE {ROLE}")).unwrap();
    force(c, true);
    for (what, sql, _) in &joined {
        let plan = gpuindex_tests::explain(c, sql);
        assert!(plan.contains("Outer Call"), "{what}: the join does not run the call:\n{plan}");
    }
    force(c, false);
    c.batch_execute("RESET ROLE").unwrap();
    for (i, (what, got, want)) in cases.iter().chain(&joined).enumerate() {
        let fused = i >= cases.len();
        c.batch_execute(&format!("SET ROLE {ROLE}")).unwrap();
        force(c, fused);
        let g = pairs(c, got);
        force(c, false);
        let w = pairs(c, want);
        c.batch_execute("RESET ROLE").unwrap();
        assert_eq!(g, w, "{what} of {n} queries as {ROLE}: not what a SELECT by the role returns");
        // Not vacuous: the superuser sees more through the same function.
        if n >= 50 {
            let all = pairs(c, got);
            assert!(all.len() > g.len(), "{what}: the policy hides nothing ({} rows)", g.len());
        }
    }
    // kNN: the k nearest rows the role may see, by distance (ties may pick
    // other rows).
    let k = 1 + rng.below(8) as i32;
    let dist = |c: &mut Client, sql: String| -> Vec<(i64, f64)> {
        c.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    c.batch_execute(&format!("SET ROLE {ROLE}")).unwrap();
    let got =
        dist(c, format!("SELECT ord, distance FROM gpu_spatial_knn('sec_t_p', {}, {k}) ORDER BY ord, distance", array(&centres, "point")));
    let want = dist(
        c,
        format!(
            "SELECT q.ord, t.d FROM unnest({}) WITH ORDINALITY q(c, ord), LATERAL (SELECT p <-> q.c AS d FROM sec_t ORDER BY p <-> q.c LIMIT {k}) t ORDER BY 1, 2",
            array(&centres, "point")
        ),
    );
    // And the TIDs it returns are all rows the role may see.
    let hidden: i64 = c
        .query_one(
            &format!(
                "SELECT count(*) FROM gpu_spatial_knn('sec_t_p', {}, {k}) r WHERE NOT EXISTS (SELECT 1 FROM sec_t t WHERE t.ctid = r.ctid)",
                array(&centres, "point")
            ),
            &[],
        )
        .unwrap()
        .get(0);
    c.batch_execute("RESET ROLE").unwrap();
    assert_eq!(got, want, "gpu_spatial_knn of {n} points, k = {k}, as {ROLE}");
    assert_eq!(hidden, 0, "gpu_spatial_knn returned rows the policy hides");
}

#[test]
fn functions_return_what_a_select_by_the_role_returns() {
    let mut c = connect(DB);
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    let mut rng = SplitMix64::new(808);
    setup(&mut c, &mut rng);
    for round in 0..3 {
        for n in [1usize, 50, 2000] {
            compare_as_role(&mut c, &mut rng, n);
        }
        match round {
            // Dead rows, HOT and non-HOT updates, inserts into the delta.
            0 => c
                .batch_execute(
                    "DELETE FROM sec_t WHERE id % 11 = 0;
                     UPDATE sec_t SET k = k + 1 WHERE id % 13 = 1;
                     UPDATE sec_t SET p = point(p[0] + 0.25, p[1]) WHERE id % 17 = 2;
                     INSERT INTO sec_t SELECT 20000 + g, g % 700, point(10 + (g % 40) * 0.25, 10 + (g / 40) * 0.25) FROM generate_series(1, 3000) g;
                     INSERT INTO sec_allowed SELECT 20000 + g FROM generate_series(1, 3000, 2) g;",
                )
                .unwrap(),
            1 => c.batch_execute("VACUUM sec_t").unwrap(),
            _ => {}
        }
    }
}

#[test]
fn refusals_name_the_table() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DO $$ BEGIN CREATE ROLE gpuindex_it_nobody; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
         DROP TABLE IF EXISTS sec_closed;
         CREATE TABLE sec_closed (k int8, p point);
         INSERT INTO sec_closed SELECT g, point(g, g) FROM generate_series(1, 100) g;
         CREATE INDEX sec_closed_k ON sec_closed USING gpu_btree (k);
         CREATE INDEX sec_closed_kl ON sec_closed USING gpu_learned (k);
         CREATE INDEX sec_closed_p ON sec_closed USING gpu_spatial (p);",
    )
    .unwrap();
    c.batch_execute("SET ROLE gpuindex_it_nobody").unwrap();
    for sql in [
        "SELECT * FROM gpu_btree_probe('sec_closed_k', ARRAY[1]::int8[])",
        "SELECT * FROM gpu_learned_probe('sec_closed_kl', ARRAY[1]::int8[])",
        "SELECT * FROM gpu_spatial_range('sec_closed_p', ARRAY[box '(0,0),(5,5)'])",
        "SELECT * FROM gpu_spatial_knn('sec_closed_p', ARRAY[point '(0,0)'], 1)",
    ] {
        let e = c.query(sql, &[]).expect_err(sql);
        let (code, msg, _) = error_of(&e);
        assert_eq!((code.as_str(), msg.as_str()), ("42501", "permission denied for table sec_closed"), "{sql}");
    }
    let e = c.query("SELECT gpu_spatial_merge('sec_closed_p')", &[]).expect_err("merge");
    assert_eq!(error_of(&e).1, "must be owner of table sec_closed");
    for sql in ["SELECT * FROM gpu_btree_check('sec_closed_k')", "SELECT * FROM gpu_learned_check('sec_closed_kl')"] {
        let e = c.query(sql, &[]).expect_err(sql);
        assert_eq!(error_of(&e).0, "42501", "{sql}");
    }
    c.batch_execute("RESET ROLE").unwrap();
}

//! Helpers for the integration tests: they run against a live server
//! (PGHOST, PGPORT, PGUSER from the environment; scripts/test.sh starts a
//! throwaway cluster and sets them), each test file in its own database.

use postgres::{Client, Config, NoTls};

fn config(db: &str) -> Config {
    let mut c = Config::new();
    c.host(&std::env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".into()));
    c.port(std::env::var("PGPORT").ok().and_then(|p| p.parse().ok()).unwrap_or(5432));
    c.user(&std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()));
    c.dbname(db);
    c
}

/// A connection to database `db`, created (with the extension) on first use.
pub fn connect(db: &str) -> Client {
    let mut admin = config("postgres").connect(NoTls).expect("connect to the test server (PGHOST/PGPORT)");
    let exists = admin.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db]).unwrap().is_some();
    if !exists {
        // Concurrent tests may race to create it; a duplicate is fine.
        let _ = admin.batch_execute(&format!("CREATE DATABASE {db}"));
    }
    let mut c = config(db).connect(NoTls).expect("connect to the test database");
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS gpuindex").ok();
    c
}

/// Whether the server's backends find a usable GPU.
pub fn server_has_gpu(c: &mut Client) -> bool {
    c.query_one("SELECT gpu_found FROM gpuindex_device_info()", &[]).unwrap().get(0)
}

/// The GPU is required (GPUINDEX_REQUIRE_GPU=1) but the server has none.
pub fn gpu_missing_but_required(c: &mut Client) -> bool {
    gpuindex_engine::gpu_required() && !server_has_gpu(c)
}

/// SQLSTATE, message and hint of a failed statement.
pub fn error_of(e: &postgres::Error) -> (String, String, Option<String>) {
    let db = e.as_db_error().unwrap_or_else(|| panic!("not a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string(), db.hint().map(str::to_string))
}

//! Test support: a fresh, migrated PostgreSQL database per test, cloned from a template.
//!
//! The server comes from `OCC_TEST_DATABASE_URL` (an admin URL; `scripts/test` starts a
//! throwaway cluster and sets it). Every test gets its own database, dropped on drop.

#![allow(dead_code)] // Helpers are shared by modules that each use a subset.

use occ_worker::db;
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static COUNTER: AtomicUsize = AtomicUsize::new(0);
static TEMPLATE: OnceLock<String> = OnceLock::new();

/// The admin URL of the test server.
pub fn admin_url() -> String {
    std::env::var("OCC_TEST_DATABASE_URL").expect(
        "OCC_TEST_DATABASE_URL is not set: run the tests through scripts/test, which starts PostgreSQL",
    )
}

fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    format!("{base}/{db}")
}

fn template() -> &'static str {
    TEMPLATE.get_or_init(|| {
        let admin = admin_url();
        let mut client = Client::connect(&admin, NoTls).expect("connect to test server");
        let name = format!("occ_template_{}", std::process::id());
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .expect("drop old template database");
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create template database");
        let mut tpl = Client::connect(&with_db(&admin, &name), NoTls).expect("connect template");
        occ_worker::migrate::run(&mut tpl).expect("migrate template");
        drop(tpl);
        name
    })
}

/// A fresh migrated database, dropped when this value drops.
pub struct TestDb {
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub fn new() -> TestDb {
        let template = template();
        let name = format!(
            "occ_t_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let mut admin = Client::connect(&admin_url(), NoTls).expect("connect to test server");
        // Nothing stays connected to the template, so clones may run in parallel.
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .expect("clone template database");
        TestDb {
            url: with_db(&admin_url(), &name),
            name,
        }
    }

    /// A fresh database with the Installation `inst` and administrator `admin` bootstrapped.
    pub fn bootstrapped() -> TestDb {
        let db = TestDb::new();
        db.client()
            .execute("SELECT occ.bootstrap('inst', 'admin')", &[])
            .expect("bootstrap");
        db
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to test database")
    }

    pub fn pool(&self, size: u32) -> db::Pool {
        db::pool(&self.url, Duration::from_secs(10), size).expect("test pool")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Inserts a Namespace row directly (tests that exercise the queue, not admission).
pub fn insert_namespace(client: &mut Client, id: &str, status: &str) {
    client
        .execute(
            "INSERT INTO occ.namespaces_all (id, name, status, created_by) VALUES ($1, $1, $2, 'admin')",
            &[&id, &status],
        )
        .expect("insert namespace");
}

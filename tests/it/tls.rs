//! W5: TLS to PostgreSQL. A private cluster (`scripts/pg-start target/pg-tls`, never the shared
//! one) serves a certificate for `127.0.0.1`/`localhost` from a per-run CA; the worker's
//! connections honour `sslmode` and `sslrootcert` from the connection string.

use crate::kube_fake::tls::{leaf, new_ca};
use crate::outage::Cluster;
use rcgen::{ExtendedKeyUsagePurpose, SanType};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn write_private(path: &Path, contents: &str, mode: u32) {
    std::fs::write(path, contents).expect("write PEM");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root_user {
        let status = Command::new("chown")
            .args(["postgres:postgres", &path.to_string_lossy()])
            .status()
            .expect("chown");
        assert!(status.success());
    }
}

/// Whether the connection made from `url` is encrypted, by the server's own account.
fn encrypted(url: &str) -> Result<bool, String> {
    let mut client =
        occ_worker::db::connect(url, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

// W5: verify-full with the right CA connects encrypted (by IP and by name), through a single
// connection and through the pool; a wrong CA is refused for verify-full, verify-ca and a
// require that names a root certificate; require without one encrypts without verifying;
// verify-full without sslrootcert is refused before connecting; disable stays plaintext.
#[test]
fn w5_tls_to_postgres_follows_sslmode_and_sslrootcert() {
    let cluster = Cluster::start_in("target/pg-tls");
    assert_ne!(cluster.url, crate::support::admin_url());
    let ca = new_ca("occ-pg-test-ca");
    let other_ca = new_ca("occ-pg-other-ca");
    let (cert, key) = leaf(
        &ca,
        "postgres",
        vec![
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::DnsName("localhost".try_into().unwrap()),
        ],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let dir = cluster.dir.clone();
    let (crt_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
    write_private(&crt_path, &cert.pem(), 0o644);
    write_private(&key_path, &key.serialize_pem(), 0o600);
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.0.pem()).unwrap();
    let other_path = dir.join("other-ca.crt");
    std::fs::write(&other_path, other_ca.0.pem()).unwrap();
    {
        let mut admin = postgres::Client::connect(&cluster.url, postgres::NoTls).unwrap();
        // One statement at a time: a multi-statement string is one transaction, and ALTER
        // SYSTEM refuses to run in one.
        for sql in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{}'", crt_path.display()),
            format!("ALTER SYSTEM SET ssl_key_file = '{}'", key_path.display()),
            "ALTER SYSTEM SET ssl = on".to_string(),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            admin.batch_execute(&sql).unwrap();
        }
    }
    crate::support::wait_for("ssl on after the reload", Duration::from_secs(10), || {
        let mut c = postgres::Client::connect(&cluster.url, postgres::NoTls).unwrap();
        crate::support::scalar::<String>(&mut c, "SHOW ssl") == "on"
    });
    let by_ip = cluster.url.clone();
    let by_name = by_ip.replace("127.0.0.1", "localhost");
    let with = |url: &str, params: &str| format!("{url}?{params}");
    let ca_file = ca_path.display().to_string();
    let other_file = other_path.display().to_string();

    for url in [&by_ip, &by_name] {
        let full = with(url, &format!("sslmode=verify-full&sslrootcert={ca_file}"));
        assert_eq!(encrypted(&full), Ok(true), "{full}");
    }
    let full = with(
        &by_ip,
        &format!("sslmode=verify-full&sslrootcert={ca_file}"),
    );
    let pool = occ_worker::db::pool(&full, Duration::from_secs(10), 2).expect("pool");
    let ssl: bool = pool
        .get()
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(ssl, "pooled connections are encrypted");
    assert_eq!(
        encrypted(&with(
            &by_ip,
            &format!("sslmode=verify-ca&sslrootcert={ca_file}")
        )),
        Ok(true)
    );

    for mode in ["verify-full", "verify-ca", "require"] {
        let url = with(&by_ip, &format!("sslmode={mode}&sslrootcert={other_file}"));
        let e = encrypted(&url).expect_err("a certificate from another CA is refused");
        assert!(e.contains("database unavailable"), "{mode}: {e}");
    }
    assert_eq!(encrypted(&with(&by_ip, "sslmode=require")), Ok(true));
    let e = encrypted(&with(&by_ip, "sslmode=verify-full")).unwrap_err();
    assert!(e.contains("needs sslrootcert"), "{e}");
    assert_eq!(encrypted(&with(&by_ip, "sslmode=disable")), Ok(false));
}

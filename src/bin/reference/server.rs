//! What the reference HTTPS servers share (`occ-hook`, SPEC §14; `occ-git-sender`, SPEC G22):
//! their arguments, their TLS configuration, one thread per connection, reading one JSON
//! request of at most 64 KiB and writing one JSON answer. A request it cannot read is closed
//! unanswered. Included by each binary with `#[path]`; it is not a binary of its own.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The largest request read.
pub const REQUEST_LIMIT: usize = 64 * 1024;

/// One connection's TLS stream.
pub type Stream = StreamOwned<ServerConnection, TcpStream>;

/// `--cert`, `--key`, `--policy` and `--listen`.
pub struct Options {
    pub listen: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub policy: PathBuf,
}

/// The command line, `--listen` defaulting to `default_listen`; `--help` prints `usage`.
pub fn options(usage: &str, default_listen: &str) -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut cert, mut key, mut policy) =
        (default_listen.to_string(), None, None, None);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = value()?,
            "--cert" => cert = Some(PathBuf::from(value()?)),
            "--key" => key = Some(PathBuf::from(value()?)),
            "--policy" => policy = Some(PathBuf::from(value()?)),
            "--help" | "-h" => {
                println!("{usage}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    let required =
        |v: Option<PathBuf>, name: &str| v.ok_or(format!("{name} is required (see --help)"));
    Ok(Options {
        listen,
        cert: required(cert, "--cert")?,
        key: required(key, "--key")?,
        policy: required(policy, "--policy")?,
    })
}

fn tls(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("--cert {}: no PEM certificate", cert.display()));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key {}: {e}", key.display()))?;
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("--cert/--key: {e}"))?;
    Ok(Arc::new(config))
}

/// Parses the command line, binds and serves forever: `{"event": EVENT, "addr": …}` once
/// listening, then `serve` for each readable request on its own thread. Bad arguments or an
/// unreadable certificate or key exit 2 with one line, prefixed by `name`.
pub fn run(
    name: &str,
    usage: &str,
    default_listen: &str,
    event: &str,
    serve: fn(&mut Stream, String, Value, &Path),
) {
    let fail = |e: String| -> ! {
        eprintln!("{name}: {}", e.replace('\n', " "));
        std::process::exit(2);
    };
    let options = options(usage, default_listen).unwrap_or_else(|e| fail(e));
    let (tls, listener) = tls(&options.cert, &options.key)
        .and_then(|tls| {
            TcpListener::bind(&options.listen)
                .map(|l| (tls, l))
                .map_err(|e| format!("--listen {}: {e}", options.listen))
        })
        .unwrap_or_else(|e| fail(e));
    if let Ok(addr) = listener.local_addr() {
        println!("{}", json!({"event": event, "addr": addr.to_string()}));
    }
    let policy = Arc::new(options.policy);
    for socket in listener.incoming().flatten() {
        let (tls, policy) = (tls.clone(), policy.clone());
        std::thread::spawn(move || {
            let Ok(conn) = ServerConnection::new(tls) else {
                return;
            };
            let _ = socket.set_read_timeout(Some(Duration::from_secs(10)));
            let mut stream = StreamOwned::new(conn, socket);
            if let Some((path, request)) = read_request(&mut stream) {
                serve(&mut stream, path, request, &policy);
            }
        });
    }
}

/// Writes `answer` with `status` (`200 OK`, …) and closes the connection.
pub fn respond(stream: &mut Stream, status: &str, answer: &Value) {
    let body = answer.to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(format!("{head}{body}").as_bytes());
    stream.conn.send_close_notify();
    let _ = stream.flush();
}

/// The path and JSON body of one request, or `None` when it is not one.
fn read_request(stream: &mut impl Read) -> Option<(String, Value)> {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > REQUEST_LIMIT {
            return None;
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(head) = request.parse(&buf).ok()? else {
            continue;
        };
        let length: usize = request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
            .unwrap_or(0);
        if length > REQUEST_LIMIT {
            return None;
        }
        if buf.len() >= head + length {
            let path = request.path.unwrap_or_default().to_string();
            let body = serde_json::from_slice(&buf[head..head + length]).ok()?;
            return Some((path, body));
        }
    }
}

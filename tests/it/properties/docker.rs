//! What the Docker Engine answers, as the driver decodes it: the ping and its API version,
//! network lists, inspections and creations, container lists. A scripted Engine on a Unix
//! socket answers every request of a case with one generated status, `API-Version` header and
//! body; preflight, a Namespace's creation and its deletion each end with an observation or an
//! error, never a panic.

use super::{holds, json, near, near_bytes, run};
use crate::support::socket_path;
use occ_worker::cancel::CancelToken;
use occ_worker::compute::docker::DockerDriver;
use occ_worker::compute::{ComputeDriver, NamespaceSpec};
use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One case's answer to every request.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    api_version: String,
    body: Vec<u8>,
}

struct Engine {
    path: PathBuf,
    reply: Arc<Mutex<Reply>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Engine {
    fn start() -> Engine {
        let path = socket_path("prop-docker");
        let listener = UnixListener::bind(&path).expect("bind the Engine socket");
        let reply = Arc::new(Mutex::new(Reply {
            status: 200,
            api_version: "1.41".into(),
            body: b"OK".to_vec(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (reply, stop) = (reply.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        let reply = reply.lock().clone();
                        answer(stream, &reply);
                    }
                }
            })
        };
        Engine {
            path,
            reply,
            stop,
            thread: Some(thread),
        }
    }
}

/// Reads one request (head and `Content-Length` body) and answers `reply`, then closes.
fn answer(stream: UnixStream, reply: &Reply) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nAPI-Version: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.status,
        reply.api_version,
        reply.body.len()
    )
    .into_bytes();
    out.extend_from_slice(&reply.body);
    let mut stream = reader.into_inner();
    let _ = stream.write_all(&out);
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn the_docker_driver_decodes_any_engine_answer_or_fails_without_panicking() {
    let engine = Engine::start();
    let driver = DockerDriver::new(&format!("unix://{}", engine.path.display()))
        .expect("driver")
        .with_request_timeout(Duration::from_secs(2));
    let namespace = NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        name: "test".into(),
        existing_namespace: None,
    };
    let labels = json!({"occ.managed-by": "occ-worker", "occ.installation": "inst",
                        "occ.namespace": "ns1"});
    let network = json!({"Id": "n1", "Name": "occ-inst-ns1", "Labels": labels,
                         "IPAM": {"Config": [{"Subnet": "172.16.5.0/24", "Gateway": "172.16.5.1"}]},
                         "Containers": {"c1": {"Name": "x"}}});
    let documents = vec![
        json!([network.clone(), network.clone()]),
        network,
        json!({"Id": "n2", "Warning": ""}),
        json!([{"Id": "c1", "Names": ["/occ-x"], "Labels": labels, "State": "running"}]),
        json!({"ApiVersion": "1.43", "Version": "24.0.0"}),
        json!({"message": "Pool overlaps with other one on this address space"}),
    ];
    let body = prop::sample::select(documents).prop_flat_map(|valid| {
        prop_oneof![
            4 => near(valid.clone()).prop_map(|v| v.to_string().into_bytes()),
            1 => json().prop_map(|v| v.to_string().into_bytes()),
            1 => near_bytes(valid.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..96),
        ]
    });
    let status = prop_oneof![
        3 => Just(200u16),
        2 => prop::sample::select(vec![201u16, 204, 304, 400, 403, 404, 409, 500]),
    ];
    let api_version = prop_oneof![
        Just("1.41".to_string()),
        Just("1.24".to_string()),
        "[0-9]{1,12}\\.[0-9]{1,12}",
        "[ -~]{0,12}",
    ];
    let cancel = CancelToken::unbounded();
    holds(run(
        file!(),
        super::cases(600),
        (status, api_version, body),
        |(status, api_version, body)| {
            *engine.reply.lock() = Reply {
                status,
                api_version,
                body,
            };
            let _ = driver.preflight(&cancel);
            let _ = driver.ensure_namespace(&namespace, &cancel);
            let _ = driver.delete_namespace(&namespace, &cancel);
            Ok(())
        },
    ));
}

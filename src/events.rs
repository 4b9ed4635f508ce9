//! Structured event lines (SPEC W7): one JSON object per line on stdout, or for a person at a
//! terminal (`Format::Text`) one readable line per event, `worker.health` only when it says
//! something new. An idle worker's `worker.health` (SPEC Z7's beat between passes) is quiet in
//! JSON too: written when it says something new, else once every `IDLE_HEALTH_REPEAT`.
//!
//! Owns the event names, the sink and the two formats. Events carry ids, codes, error classes, HTTP statuses
//! and Kubernetes Status reasons; callers must never put provider free text, secret values or
//! tokens into them.

use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Log targets whose records are never written, whatever `RUST_LOG` says (SPEC W7: logs never
/// carry provider free text, secret values or tokens). ureq-proto's trace records dump every
/// request and answer byte for byte: the bearer token and client headers, Kubernetes Secrets'
/// data, hook and sender bodies.
pub const NEVER_LOGGED: &[&str] = &["ureq_proto"];

/// Whether a `log` record of `target` may be written (`NEVER_LOGGED`).
pub fn log_target_allowed(target: &str) -> bool {
    !NEVER_LOGGED.iter().any(|t| {
        target == *t
            || target
                .strip_prefix(t)
                .is_some_and(|rest| rest.starts_with("::"))
    })
}

/// How often an idle worker's unchanged `worker.health` is written as JSON: often enough that
/// a log shows the process alive, rare enough that an idle worker's log stays small.
pub const IDLE_HEALTH_REPEAT: Duration = Duration::from_secs(600);

/// How event lines are written (`OCC_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `{"event":"worker.started","at":1767225600000,...}`: for machines (SPEC W7).
    Json,
    /// `12:00:00.000 worker.started computeDriverId=docker concurrency=8`: for people.
    Text,
}

/// A cloneable sink for event lines.
#[derive(Clone)]
pub struct Events {
    sink: Arc<Mutex<Sink>>,
}

struct Sink {
    out: Box<dyn Write + Send>,
    format: Format,
    /// The fields of the last `worker.health` written, and when.
    last_health: Option<(Map<String, Value>, Instant)>,
}

impl Events {
    /// Events on standard output, in `format`, or when none is given as text if stdout is a
    /// terminal and JSON otherwise.
    pub fn stdout(format: Option<Format>) -> Events {
        use std::io::IsTerminal;
        let format = format.unwrap_or(if std::io::stdout().is_terminal() {
            Format::Text
        } else {
            Format::Json
        });
        Events::formatted(Box::new(std::io::stdout()), format)
    }

    /// JSON events into any writer (tests capture them).
    pub fn to(sink: Box<dyn Write + Send>) -> Events {
        Events::formatted(sink, Format::Json)
    }

    /// Events into any writer, in `format`.
    pub fn formatted(out: Box<dyn Write + Send>, format: Format) -> Events {
        Events {
            sink: Arc::new(Mutex::new(Sink {
                out,
                format,
                last_health: None,
            })),
        }
    }

    /// A sink that drops everything.
    pub fn discard() -> Events {
        Events::to(Box::new(std::io::sink()))
    }

    /// Writes `{"event": name, "at": <epoch ms>, ...fields}` as one line.
    pub fn emit(&self, name: &str, fields: Value) {
        self.write(name, fields, Repeat::Always)
    }

    /// `worker.health` with the queue depth after a pass (SPEC Z7): always as JSON; as text,
    /// only when it says something new, so a terminal is not flooded.
    pub fn health(&self, pending: i64) {
        self.write(
            "worker.health",
            serde_json::json!({"status": "ready", "pending": pending}),
            Repeat::WhenChangedAsText,
        )
    }

    /// An idle worker's `worker.health` (SPEC Z7's beat between passes): only when it says
    /// something new, and as JSON also once every `IDLE_HEALTH_REPEAT` when it does not.
    pub fn idle_health(&self, pending: i64) {
        self.write(
            "worker.health",
            serde_json::json!({"status": "ready", "pending": pending}),
            Repeat::WhenChanged,
        )
    }

    fn write(&self, name: &str, fields: Value, repeat: Repeat) {
        let mut object = Map::new();
        object.insert("event".into(), Value::from(name));
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        object.insert("at".into(), Value::from(at));
        if let Value::Object(extra) = fields {
            for (k, v) in extra {
                if !v.is_null() {
                    object.insert(k, v);
                }
            }
        }
        let mut sink = self.sink.lock();
        if repeat != Repeat::Always {
            let mut said = object.clone();
            said.remove("at");
            said.remove("event");
            let repeated = sink.last_health.as_ref().is_some_and(|(last, when)| {
                *last == said
                    && (sink.format == Format::Text
                        || (repeat == Repeat::WhenChanged && when.elapsed() < IDLE_HEALTH_REPEAT))
            });
            if repeated {
                return;
            }
            sink.last_health = Some((said, Instant::now()));
        }
        let line = match sink.format {
            Format::Json => Value::Object(object).to_string() + "\n",
            Format::Text => text_line(at, &object),
        };
        // An unwritable stdout must not stop the worker; the event is lost, the work is not.
        let _ = sink.out.write_all(line.as_bytes());
        let _ = sink.out.flush();
    }
}

/// Whether a line that repeats the last one of its kind is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Repeat {
    Always,
    /// As JSON always; as text only when it says something new.
    WhenChangedAsText,
    /// Only when it says something new; as JSON also once every `IDLE_HEALTH_REPEAT`.
    WhenChanged,
}

/// `HH:MM:SS.mmm event key=value …` (UTC): strings bare unless they hold a space or a quote,
/// anything else as JSON.
fn text_line(at_ms: u64, object: &Map<String, Value>) -> String {
    let day_ms = at_ms % 86_400_000;
    let mut line = format!(
        "{:02}:{:02}:{:02}.{:03} {}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000,
        object.get("event").and_then(Value::as_str).unwrap_or("-")
    );
    for (k, v) in object {
        if k == "event" || k == "at" {
            continue;
        }
        let shown = match v {
            Value::String(s) if !s.is_empty() && !s.contains([' ', '"', '=']) => s.clone(),
            other => other.to_string(),
        };
        line.push_str(&format!(" {k}={shown}"));
    }
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // W7: the HTTP wire dump is never logged; its neighbours (ureq's own header-redacting
    // lines, the worker's records) are.
    #[test]
    fn the_wire_dump_is_never_logged() {
        assert!(!log_target_allowed("ureq_proto"));
        assert!(!log_target_allowed("ureq_proto::util"));
        assert!(log_target_allowed("ureq_protocol"));
        assert!(log_target_allowed("ureq::run"));
        assert!(log_target_allowed(
            "occ_worker::compute::kubernetes::client"
        ));
    }

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_lines_name_the_event_and_its_fields_after_the_time() {
        let mut object = Map::new();
        object.insert("event".into(), json!("worker.completed"));
        object.insert("key".into(), json!("namespace:ns-1:ensure"));
        object.insert("reason".into(), json!("two words"));
        object.insert("timings".into(), json!({"passMs": 12}));
        assert_eq!(
            text_line(1_767_225_600_000 + 3_723_004, &object),
            "01:02:03.004 worker.completed key=namespace:ns-1:ensure reason=\"two words\" timings={\"passMs\":12}\n"
        );
    }

    #[test]
    fn as_text_worker_health_is_written_only_when_it_changes() {
        let out = Captured::default();
        let events = Events::formatted(Box::new(out.clone()), Format::Text);
        for pending in [0, 0, 1, 1, 0] {
            events.health(pending);
        }
        events.emit("worker.stopped", json!({}));
        let text = String::from_utf8(out.0.lock().clone()).unwrap();
        let said: Vec<&str> = text.lines().map(|l| &l[13..]).collect();
        assert_eq!(
            said,
            [
                "worker.health pending=0 status=ready",
                "worker.health pending=1 status=ready",
                "worker.health pending=0 status=ready",
                "worker.stopped",
            ]
        );
        let json = Captured::default();
        let events = Events::formatted(Box::new(json.clone()), Format::Json);
        for _ in 0..2 {
            events.health(0);
        }
        let text = String::from_utf8(json.0.lock().clone()).unwrap();
        assert_eq!(
            text.lines().count(),
            2,
            "JSON keeps every beat after a pass (SPEC Z7)"
        );
    }

    #[test]
    fn an_idle_worker_s_health_is_quiet_in_json_too() {
        let json = Captured::default();
        let events = Events::formatted(Box::new(json.clone()), Format::Json);
        // An hour of idle beats at the default cadence (every 5 s), the queue unchanged but
        // for one work that came and went.
        for beat in 0..720 {
            events.idle_health(if beat == 100 { 1 } else { 0 });
        }
        events.health(0);
        events.idle_health(0);
        let text = String::from_utf8(json.0.lock().clone()).unwrap();
        let pending: Vec<i64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["pending"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(pending, [0, 1, 0, 0], "{text}");
        // Unchanged, it is said again once IDLE_HEALTH_REPEAT has passed.
        let sink = &events.sink;
        if let Some((_, when)) = sink.lock().last_health.as_mut() {
            *when -= IDLE_HEALTH_REPEAT;
        }
        events.idle_health(0);
        assert_eq!(
            String::from_utf8(json.0.lock().clone())
                .unwrap()
                .lines()
                .count(),
            5
        );
    }
}

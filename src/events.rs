//! Structured event lines (SPEC W7): one JSON object per line on stdout.
//!
//! Owns the event names and the sink. Events carry ids, codes, error classes, HTTP statuses
//! and Kubernetes Status reasons; callers must never put provider free text, secret values or
//! tokens into them.

use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::io::Write;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A cloneable sink for event lines.
#[derive(Clone)]
pub struct Events {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Events {
    /// Events on standard output.
    pub fn stdout() -> Events {
        Events::to(Box::new(std::io::stdout()))
    }

    /// Events into any writer (tests capture them).
    pub fn to(sink: Box<dyn Write + Send>) -> Events {
        Events {
            sink: Arc::new(Mutex::new(sink)),
        }
    }

    /// A sink that drops everything.
    pub fn discard() -> Events {
        Events::to(Box::new(std::io::sink()))
    }

    /// Writes `{"event": name, "at": <epoch ms>, ...fields}` as one line.
    pub fn emit(&self, name: &str, fields: Value) {
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
        let mut line = Value::Object(object).to_string();
        line.push('\n');
        let mut sink = self.sink.lock();
        // An unwritable stdout must not stop the worker; the event is lost, the work is not.
        let _ = sink.write_all(line.as_bytes());
        let _ = sink.flush();
    }
}

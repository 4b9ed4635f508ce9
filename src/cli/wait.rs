//! `--wait[=TIMEOUT]` of the commands that enqueue work, and `admin work watch KEY`: follow one
//! work row until it ends (SPEC section 9), showing the state of what it changes
//! (`provisioning`, `deploying`, `stopping`, `deleting`, …), the code its latest attempt
//! reported and the time waited, then how the work ended. On a terminal that is one line redrawn in place on stderr;
//! otherwise a plain line each time the state or code changes. The exit code says how it
//! ended: 0 succeeded, `FAILED` failed for good, `TIMED_OUT` still running when the timeout
//! passed (the work goes on), `INTERRUPTED` when Ctrl-C stopped the wait (the work goes on).
//!
//! It only reads. The schema notifies new work only (`occ_work`, for the workers' wake-up),
//! not a row's progress, so the follower reads its one row a few times a second; and because
//! workers leave no row of their own, a worker counts as alive while it renews a claim or
//! records attempts (`operator::worker_seen`).

use super::error::CliError;
use super::globals::Globals;
use occ_worker::operator;
use occ_worker::queue::{self, WorkState};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Exit code: the work failed for good (`failed_permanent`).
pub const FAILED: u8 = 3;
/// Exit code: the timeout passed while the work still ran.
pub const TIMED_OUT: u8 = 4;
/// Exit code: Ctrl-C (SIGINT) stopped the wait, not the work (128 + 2, as a shell reports it).
pub const INTERRUPTED: u8 = 130;

/// How long `--wait` without a value waits.
const DEFAULT_TIMEOUT: &str = "10m";
/// How often the row is read (and the spinner turns). A read by key, not LISTEN: the queue
/// announces new work (`occ_work`), not progress, and a notification from every publication
/// would tax the hot path (a statement trigger that notifies cost 10-15 % of single-row commit
/// throughput in pgbench at 8 clients with fsync on), so a follower pays for itself instead.
const POLL: Duration = Duration::from_millis(250);
/// How long the wait runs before it asks whether any worker is alive, and how often after.
const LIVENESS_AFTER: Duration = Duration::from_secs(5);
/// A worker not seen for this long is warned about.
const WORKER_SILENT_SECS: f64 = 30.0;

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// `--wait[=TIMEOUT]`, flattened into every command that enqueues work.
#[derive(clap::Args, Clone, Copy, Default)]
pub struct WaitArg {
    /// Wait until the queued work ends, showing its progress on stderr: exit 0 when it
    /// succeeded, 3 when it failed for good, 4 when TIMEOUT (default 10m; 90s, 15m, 1h) passed
    /// first.
    #[arg(
        long,
        value_name = "TIMEOUT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = DEFAULT_TIMEOUT,
        value_parser = parse_timeout,
    )]
    pub wait: Option<Duration>,
}

/// `90s`, `15m`, `1h` or a number of seconds.
pub fn parse_timeout(value: &str) -> Result<Duration, String> {
    let (count, unit) = match value.char_indices().last() {
        Some((i, 's')) => (&value[..i], 1),
        Some((i, 'm')) => (&value[..i], 60),
        Some((i, 'h')) => (&value[..i], 3600),
        _ => (value, 1),
    };
    match count.parse::<u64>() {
        Ok(n) if n > 0 && n <= 7 * 24 * 3600 / unit => Ok(Duration::from_secs(n * unit)),
        _ => Err("a timeout is a positive number of seconds, or one with s, m or h (90s, 15m, 1h), up to a week".into()),
    }
}

/// What the follower saw of the row at one read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// While the work runs, the state of what it changes (`operator::work_subject`) when
    /// known; the work's own state otherwise and once it ended.
    state: String,
    code: Option<String>,
    /// How the work ended, once it did.
    end: Option<WorkState>,
}

impl Seen {
    /// The row, and while it runs the state of its subject.
    fn of(row: &queue::WorkView, subject: Option<String>) -> Seen {
        let latest = row
            .evidence
            .as_ref()
            .and_then(|e| e.as_array())
            .and_then(|a| a.last())
            .and_then(|a| a["code"].as_str())
            .map(str::to_string);
        let ended = row.state.ended();
        Seen {
            state: match subject {
                Some(subject) if !ended => subject,
                _ => row.state.as_str().to_string(),
            },
            code: row.reason_code.clone().or(latest),
            end: ended.then_some(row.state),
        }
    }

    fn ended(&self) -> bool {
        self.end.is_some()
    }

    fn succeeded(&self) -> bool {
        self.end == Some(WorkState::Succeeded)
    }

    /// `provisioning · NAMESPACE_ROLEBINDING_PENDING · 12 s`.
    fn line(&self, waited: Duration) -> String {
        match &self.code {
            Some(code) => format!("{} · {code} · {} s", self.state, waited.as_secs()),
            None => format!("{} · {} s", self.state, waited.as_secs()),
        }
    }
}

/// Where progress goes: a terminal redraws one line, anything else (a dumb terminal included)
/// gets a line per change.
struct Display {
    terminal: bool,
    frame: usize,
    last: Option<Seen>,
    /// Something is drawn on the current line (terminal only).
    drawn: bool,
}

impl Display {
    fn new() -> Display {
        Display {
            // A terminal that cannot clear a line (TERM=dumb) gets the plain lines.
            terminal: std::io::stderr().is_terminal()
                && std::env::var("TERM").map_or(true, |t| t != "dumb"),
            frame: 0,
            last: None,
            drawn: false,
        }
    }

    fn write(text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }

    /// The row as it stands now.
    fn show(&mut self, key: &str, seen: &Seen, waited: Duration) {
        if self.terminal {
            self.frame = (self.frame + 1) % SPINNER.len();
            Display::write(&format!(
                "\r\x1b[2K{} {}",
                SPINNER[self.frame],
                seen.line(waited)
            ));
            self.drawn = true;
        } else if self.last.as_ref() != Some(seen) {
            Display::write(&format!("{key}: {}\n", seen.line(waited)));
        }
        self.last = Some(seen.clone());
    }

    /// A line of its own (a warning), above the redrawn one.
    fn note(&mut self, text: &str) {
        self.clear();
        Display::write(&format!("{text}\n"));
    }

    /// The last line: how it ended.
    fn end(&mut self, key: &str, seen: &Seen, waited: Duration) {
        self.clear();
        if self.terminal {
            let mark = if seen.succeeded() { '✓' } else { '✗' };
            Display::write(&format!("{mark} {key}: {}\n", seen.line(waited)));
        } else {
            Display::write(&format!("{key}: {}\n", seen.line(waited)));
        }
    }

    fn clear(&mut self) {
        if self.drawn {
            Display::write("\r\x1b[2K");
            self.drawn = false;
        }
    }
}

/// Follows the work `key` that `what` enqueued until it ends or `timeout` passes.
pub fn follow(
    globals: &Globals,
    what: &str,
    key: &str,
    timeout: Option<Duration>,
) -> Result<(), CliError> {
    // Ctrl-C ends the wait, never the work: said once the current read is done, so the
    // line can say where the work stands. A second Ctrl-C while that is under way exits at once.
    let interrupted = Arc::new(AtomicBool::new(false));
    for register in [
        signal_hook::flag::register_conditional_shutdown(
            signal_hook::consts::SIGINT,
            i32::from(INTERRUPTED),
            interrupted.clone(),
        ),
        signal_hook::flag::register(signal_hook::consts::SIGINT, interrupted.clone()),
    ] {
        register?;
    }
    let mut client = globals.connect()?;
    let started = Instant::now();
    let mut display = Display::new();
    let mut next_liveness = LIVENESS_AFTER;
    let mut warned = false;
    loop {
        let waited = started.elapsed();
        let Some(seen) = observe(&mut client, key)? else {
            display.clear();
            return Err(CliError::new(format!(
                "{what}: no work with key {key:?} (admin work list)"
            )));
        };
        if seen.ended() {
            display.end(key, &seen, waited);
            return ended(what, key, &seen);
        }
        display.show(key, &seen, waited);
        if timeout.is_some_and(|t| waited >= t) {
            display.clear();
            return Err(timed_out(what, key, &seen, waited));
        }
        if interrupted.load(Ordering::Relaxed) {
            display.clear();
            return Err(stopped_waiting(what, key, &seen, waited));
        }
        if !warned && waited >= next_liveness {
            next_liveness += LIVENESS_AFTER;
            if let Some(why) = silent_worker(&mut client)? {
                display.note(&format!(
                    "warning: {why}: is `occ-worker run` running against this database?"
                ));
                warned = true;
            }
        }
        // A signal does not cut the sleep short (std retries it): Ctrl-C is seen within POLL.
        std::thread::sleep(POLL);
        if interrupted.load(Ordering::Relaxed) {
            display.clear();
            return Err(stopped_waiting(what, key, &seen, started.elapsed()));
        }
    }
}

/// Ctrl-C: where the work stands, that it goes on, and how to follow it again.
fn stopped_waiting(what: &str, key: &str, seen: &Seen, waited: Duration) -> CliError {
    let state = match &seen.code {
        Some(code) => format!("{} ({code})", seen.state),
        None => seen.state.clone(),
    };
    CliError::with_code(
        format!(
            "{what}: stopped waiting after {} s; {key} is still {state} and the work goes on (admin work watch {key} follows it again)",
            waited.as_secs()
        ),
        INTERRUPTED,
    )
}

/// The row `key` now; an Agent deletion's work that went with its Agent counts as succeeded.
/// None when no work has the key and none went that way.
fn observe(client: &mut postgres::Client, key: &str) -> Result<Option<Seen>, CliError> {
    if let Some(row) = queue::work_show(client, key)? {
        let subject = operator::work_subject(client, key)?;
        return Ok(Some(Seen::of(&row, subject)));
    }
    Ok(operator::work_gone(client, key)?.map(|_| Seen {
        state: WorkState::Succeeded.as_str().into(),
        code: Some("AGENT_DELETED".into()),
        end: Some(WorkState::Succeeded),
    }))
}

/// How a work that ended ends the command: Ok when it succeeded, `FAILED` otherwise.
fn ended(what: &str, key: &str, seen: &Seen) -> Result<(), CliError> {
    if seen.succeeded() {
        return Ok(());
    }
    Err(CliError::with_code(
        format!(
            "{what}: {key} failed: {} (admin work show {key})",
            seen.code.as_deref().unwrap_or("-")
        ),
        FAILED,
    ))
}

/// The timeout passed: where the work stands, and that it goes on.
fn timed_out(what: &str, key: &str, seen: &Seen, waited: Duration) -> CliError {
    let state = match &seen.code {
        Some(code) => format!("{} ({code})", seen.state),
        None => seen.state.clone(),
    };
    CliError::with_code(
        format!(
            "{what}: {key} is still {state} after {} s; the work goes on (admin work watch {key})",
            waited.as_secs()
        ),
        TIMED_OUT,
    )
}

/// Why no worker seems to run, when none renewed a claim or recorded an attempt lately.
fn silent_worker(client: &mut postgres::Client) -> Result<Option<String>, CliError> {
    Ok(match operator::worker_seen(client)? {
        None => Some("no worker has ever claimed work in this database".to_string()),
        Some(age) if age > WORKER_SILENT_SECS => Some(format!(
            "no worker has renewed a claim or recorded an attempt for {} s",
            age as u64
        )),
        Some(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_seconds_or_a_number_with_a_unit() {
        let secs = |v: &str| parse_timeout(v).map(|d| d.as_secs());
        assert_eq!(secs("90"), Ok(90));
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("15m"), Ok(900));
        assert_eq!(secs("1h"), Ok(3600));
        assert_eq!(secs("168h"), Ok(604_800));
        for bad in ["0", "0s", "169h", "1d", "m", "", "-5", "1.5m"] {
            assert!(secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_line_is_the_state_the_code_when_there_is_one_and_the_seconds() {
        let seen = |code: Option<&str>| Seen {
            state: "provisioning".into(),
            code: code.map(str::to_string),
            end: None,
        };
        assert_eq!(
            seen(Some("NAMESPACE_ROLEBINDING_PENDING")).line(Duration::from_millis(12_900)),
            "provisioning · NAMESPACE_ROLEBINDING_PENDING · 12 s"
        );
        assert_eq!(seen(None).line(Duration::ZERO), "provisioning · 0 s");
        assert!(!seen(None).ended());
    }
}

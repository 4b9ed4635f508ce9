//! What the operator CLI says about itself beyond clap's help: the environment section of
//! `run --help` and `check --help`, the man page (`occ-worker man`) and the shell completions
//! (`occ-worker completions SHELL`).
//!
//! The environment section is rendered from the tables of variables the readers themselves
//! use (`config::VARIABLES`, `connection::VARIABLES`, the logger's), so the help cannot miss a
//! variable the worker reads. This module only renders: it never reads the environment or the
//! database.

use occ_worker::compute::kubernetes::connection;
use occ_worker::config;
use occ_worker::variable::{Unset, Variable};
use roff::{bold, roman, Roff};

/// The logger's variable (`run` only).
pub const LOG: Variable = Variable {
    name: "RUST_LOG",
    unset: Unset::Default(super::worker::DEFAULT_LOG_FILTER),
    help: "What diagnostics go to stderr (env_logger filter syntax; RUST_LOG_STYLE sets colour)",
};

/// Which command's environment.
#[derive(Clone, Copy)]
pub enum Reader {
    Run,
    Check,
}

/// Every variable `reader` reads: the worker's settings, then the Kubernetes connection's,
/// then (for `run`) the logger's.
fn variables(reader: Reader) -> Vec<&'static Variable> {
    let mut all: Vec<&'static Variable> = config::VARIABLES
        .iter()
        .chain(connection::VARIABLES)
        .collect();
    if let Reader::Run = reader {
        all.push(&LOG);
    }
    all
}

fn unset(v: &Variable) -> String {
    match v.unset {
        Unset::Required => "[required]".into(),
        Unset::RequiredWhen(case) => format!("[required {case}]"),
        Unset::Default(value) => format!("[default: {value}]"),
        Unset::Means(meaning) => format!("[unset: {meaning}]"),
    }
}

/// The `after_help` of `run` and `check`: each variable with what unset means, then its help.
pub fn environment(reader: Reader) -> String {
    let mut out = String::from("Environment (docs/operating.md says more):\n");
    for v in variables(reader) {
        out.push_str(&format!("  {} {}\n      {}\n", v.name, unset(v), v.help));
    }
    out
}

/// The completion script of `cmd` (the whole tool's) for `shell`.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "occ-worker", &mut out);
    out
}

/// The man page, one page for the whole tool: clap_mangen's sections for the top command (its
/// list of subcommands left out, since it names a page per subcommand), then every command
/// with what it does, then the environment, then the version.
pub fn man(cmd: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    render_man(cmd, &mut out).expect("writing to memory does not fail");
    // Each section repeats roff's two-line preamble (the `Aq` string); once is enough.
    let preamble = |l: &str| l.starts_with(".ie \\n(.g") || l.starts_with(".el .ds Aq");
    let mut seen = std::collections::HashSet::new();
    String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !preamble(l) || seen.insert(*l))
        .flat_map(|l| [l, "\n"])
        .collect::<String>()
        .into_bytes()
}

fn render_man(mut cmd: clap::Command, out: &mut Vec<u8>) -> std::io::Result<()> {
    cmd.build();
    let page = clap_mangen::Man::new(cmd.clone());
    page.render_title(out)?;
    page.render_name_section(out)?;
    page.render_synopsis_section(out)?;
    page.render_description_section(out)?;
    page.render_options_section(out)?;
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for (path, about) in commands(&cmd) {
        roff.control("TP", []);
        roff.text([bold(path)]);
        roff.text([roman(about)]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([roman(
        "run and check read these (check all but RUST_LOG). Every command that connects reads \
         OCC_DATABASE_URL and OCC_WORKER_DB_TIMEOUT_MS; admin agent deploy reads \
         OCC_COMPUTE_DRIVER and OCC_WORKER_MODE, admin namespace show OCC_KUBERNETES_CONFIG.",
    )]);
    for v in variables(Reader::Run) {
        roff.control("TP", []);
        roff.text([bold(v.name), roman(format!(" {}", unset(v)))]);
        roff.text([roman(v.help)]);
    }
    roff.to_writer(out)?;
    page.render_version_section(out)
}

/// Every visible command under `cmd` (the `help` subcommands left out), depth first, as
/// `occ-worker admin role list` and its one-line description.
fn commands(cmd: &clap::Command) -> Vec<(String, String)> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, String)>) {
        for sub in cmd.get_subcommands() {
            if sub.is_hide_set() || sub.get_name() == "help" {
                continue;
            }
            let path = format!("{prefix} {}", sub.get_name());
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            out.push((path.clone(), about));
            walk(sub, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(cmd, cmd.get_name(), &mut out);
    out
}

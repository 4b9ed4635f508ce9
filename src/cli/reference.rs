//! What the operator CLI says about itself beyond clap's help: the environment section of
//! `run --help` and `check --help`, the man page (`occ-worker man`) and the shell completions
//! (`occ-worker completions SHELL`).
//!
//! The environment section is rendered from the tables of variables the readers themselves
//! use (`config::VARIABLES`, `connection::VARIABLES`, the logger's), so the help cannot miss a
//! variable the worker reads. This module only renders: it never reads the environment or the
//! database.

use super::Cli;
use clap::CommandFactory;
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

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "occ-worker", &mut out);
    out
}

/// The man page, one page for the whole tool: clap_mangen's sections for the top command (its
/// list of subcommands left out, since it names a page per subcommand), then every command
/// with what it does, then the environment, then the version.
pub fn man() -> Vec<u8> {
    let mut out = Vec::new();
    render_man(&mut out).expect("writing to memory does not fail");
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

fn render_man(out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut cmd = Cli::command();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument and every command of the tree, hidden ones included, as
    /// `occ-worker admin role list` and `occ-worker admin grant <PRINCIPAL>`.
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            let sub_path = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() && sub.get_long_about().is_none() {
                missing.push(sub_path.clone());
            }
            walk(sub, &sub_path, missing);
        }
    }

    #[test]
    fn every_argument_and_command_has_help() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "occ-worker", &mut missing);
        assert!(missing.is_empty(), "no help text:\n{}", missing.join("\n"));
    }

    fn help_of(name: &str) -> String {
        let mut cmd = Cli::command();
        cmd.build();
        cmd.find_subcommand_mut(name)
            .unwrap()
            .render_help()
            .to_string()
    }

    #[test]
    fn run_and_check_help_list_every_variable_the_worker_reads() {
        // What the parser reads, recorded: a complete Kubernetes configuration reads them all
        // (config::tests proves the table is exactly that set).
        let read = std::cell::RefCell::new(Vec::new());
        config::Config::from_lookup(|name| {
            read.borrow_mut().push(name.to_string());
            match name {
                "OCC_DATABASE_URL" => Some("postgres://x".into()),
                "OCC_COMPUTE_DRIVER" => Some("kubernetes".into()),
                "OCC_KUBERNETES_CONFIG" => Some("/etc/occ/kubernetes.json".into()),
                _ => None,
            }
        })
        .unwrap();
        let _ = connection::discover(
            |name| {
                read.borrow_mut().push(name.to_string());
                None
            },
            None,
        );
        let read = read.into_inner();
        assert!(read.len() >= 20, "{read:?}");
        for command in ["run", "check"] {
            let help = help_of(command);
            for name in &read {
                assert!(
                    help.lines()
                        .any(|l| l.trim_start().starts_with(&format!("{name} ["))),
                    "{name} is not in `{command} --help`:\n{help}"
                );
            }
        }
        let run = help_of("run");
        assert!(
            run.contains("  OCC_WORKER_CONCURRENCY [default: 8]\n"),
            "{run}"
        );
        assert!(run.contains("  OCC_DATABASE_URL [required]\n"), "{run}");
        assert!(
            run.contains("  RUST_LOG [default: warn,r2d2=off]\n"),
            "{run}"
        );
    }

    #[test]
    fn bash_completions_name_the_subcommands() {
        let script = String::from_utf8(completions(clap_complete::Shell::Bash)).unwrap();
        for name in [
            "migrate",
            "bootstrap",
            "run",
            "check",
            "admin",
            "namespace",
            "role",
            "completions",
            "man",
        ] {
            assert!(script.contains(name), "{name} in:\n{script}");
        }
        for shell in [
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let script = String::from_utf8(completions(shell)).unwrap();
            assert!(script.contains("bootstrap"), "{script}");
        }
    }

    #[test]
    fn the_man_page_has_a_title_every_command_and_the_environment() {
        let page = String::from_utf8(man()).unwrap();
        assert!(page.contains("\n.TH occ-worker 1 "), "{page}");
        assert_eq!(page.matches(".ds Aq").count(), 2, "one preamble:\n{page}");
        for section in [
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH COMMANDS",
            ".SH ENVIRONMENT",
        ] {
            assert!(page.contains(section), "{section} in:\n{page}");
        }
        for name in [
            "migrate",
            "bootstrap",
            "run",
            "check",
            "admin",
            "admin role list",
            "admin agent deploy",
            "completions",
            "man",
        ] {
            let entry = format!("\n\\fBocc\\-worker {}\\fR\n", name.replace('-', "\\-"));
            assert!(page.contains(&entry), "{entry} in:\n{page}");
        }
        assert!(!page.contains("(1)\n"), "no other pages are named:\n{page}");
        assert!(page.contains("OCC_WORKER_LEASE_MS"), "{page}");
        assert!(!page.contains("bench"), "hidden commands stay out:\n{page}");
    }
}

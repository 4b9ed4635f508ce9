//! Command-line parsing and dispatch. Commands print JSON with `--json` (camelCase, every time
//! RFC 3339 in UTC with milliseconds), otherwise a list as an aligned table and one object as
//! `key: value` lines, and fail with one line. No SQL here beyond calling library functions.

mod admin;
mod error;
mod globals;
mod reference;
mod refusal;
mod wait;
mod worker;

use clap::{CommandFactory, Parser, Subcommand};
use serde_json::Value;

pub use error::CliError;
use globals::Globals;

#[derive(Parser)]
#[command(
    name = "occ-worker",
    version,
    about = "Controller worker for Namespaces and Agents"
)]
pub struct Cli {
    /// Print JSON instead of the human form.
    #[arg(long, global = true)]
    json: bool,
    /// PostgreSQL connection string; optional when OCC_DATABASE_URL is set.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "OCC_DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply the embedded sql/ migrations, then every function and view (idempotent).
    Migrate,
    /// Create the Installation and its first administrator (idempotent).
    Bootstrap {
        /// The Installation id.
        #[arg(long)]
        installation: String,
        /// The id of the first administrator, an identity with installation-admin.
        #[arg(long)]
        admin: String,
    },
    /// Run the worker.
    #[command(after_help = reference::environment(reference::Reader::Run))]
    Run(worker::RunArgs),
    /// Check configuration, database and Compute preflight, then exit.
    #[command(after_help = reference::environment(reference::Reader::Check))]
    Check,
    /// Operator commands.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Print a shell completion script to stdout.
    ///
    /// For instance `occ-worker completions bash > /etc/bash_completion.d/occ-worker`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page to stdout (`occ-worker man > occ-worker.1`).
    Man,
}

/// Writes `bytes` to stdout; a closed stdout (`| head`) drops the rest, as `Globals::print` does.
fn write_stdout(bytes: &[u8]) {
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), bytes);
}

/// Parses the command line. Clap's own error (with the usage) is printed as clap prints it,
/// except two flags given together that exclude each other: one line naming both.
fn parse() -> Result<Cli, CliError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let e = match Cli::try_parse() {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    if e.kind() == ErrorKind::ArgumentConflict {
        let flag = |kind| match e.get(kind) {
            Some(ContextValue::String(s)) => s.split(' ').next().map(str::to_string),
            Some(ContextValue::Strings(v)) => v
                .first()
                .and_then(|s| s.split(' ').next().map(str::to_string)),
            _ => None,
        };
        if let (Some(a), Some(b)) = (flag(ContextKind::InvalidArg), flag(ContextKind::PriorArg)) {
            // Whichever came first on the command line, the same sentence.
            let (a, b) = if a < b { (a, b) } else { (b, a) };
            return Err(CliError::config(format!(
                "{a} and {b} are mutually exclusive: give one of them"
            )));
        }
    }
    // A database URL from OCC_DATABASE_URL counts as given, so clap's usage would list
    // `--database-url` among the required arguments; it is optional, and said so.
    let text: String = e
        .render()
        .to_string()
        .lines()
        .map(|line| match line.strip_prefix("Usage: ") {
            Some(usage) => format!(
                "Usage: {}\n",
                usage.replace(" --database-url <URL> ", " [--database-url <URL>] ")
            ),
            None => format!("{line}\n"),
        })
        .collect();
    if e.use_stderr() {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    std::process::exit(e.exit_code())
}

pub fn run() -> Result<(), CliError> {
    let cli = parse()?;
    let globals = Globals {
        json: cli.json,
        database_url: cli.database_url,
    };
    match cli.command {
        Command::Migrate => {
            let mut client = globals.connect()?;
            let report = occ_worker::migrate::run(&mut client)?;
            globals.print(&serde_json::to_value(report).unwrap_or_default());
            Ok(())
        }
        Command::Bootstrap {
            installation,
            admin,
        } => {
            let mut client = globals.connect()?;
            let row = client
                .query_one("SELECT occ.bootstrap($1, $2)", &[&installation, &admin])
                .map_err(|e| {
                    refusal::refused(
                        &refusal::Inputs {
                            what: "bootstrap",
                            args: &[("--installation", &installation), ("--admin", &admin)],
                        },
                        &e,
                    )
                })?;
            let v: Value = row.get(0);
            globals.print(&v);
            Ok(())
        }
        Command::Run(args) => worker::run(&globals, args),
        Command::Check => worker::check(&globals),
        Command::Admin(cmd) => admin::run(&globals, cmd),
        Command::Completions { shell } => {
            write_stdout(&reference::completions(Cli::command(), shell));
            Ok(())
        }
        Command::Man => {
            write_stdout(&reference::man(Cli::command()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    //! What the tool says about itself (`reference`), on the whole command tree.
    use super::*;
    use occ_worker::compute::kubernetes::connection;
    use occ_worker::config;

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
        let script = String::from_utf8(reference::completions(
            Cli::command(),
            clap_complete::Shell::Bash,
        ))
        .unwrap();
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
            let script = String::from_utf8(reference::completions(Cli::command(), shell)).unwrap();
            assert!(script.contains("bootstrap"), "{script}");
        }
    }

    #[test]
    fn the_man_page_has_a_title_every_command_and_the_environment() {
        let page = String::from_utf8(reference::man(Cli::command())).unwrap();
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

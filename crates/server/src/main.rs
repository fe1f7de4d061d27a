//! `modus`: one web server, every classic concurrency architecture.

mod admin;
mod config;
mod demo_programs;
mod redirect;
mod serve;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// An HTTP/1.1 web server whose concurrency model is a startup switch.
#[derive(Parser, Debug)]
#[command(name = "modus", version, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a directory (or, with no ROOT, the built-in demo site)
    Serve(Box<config::ServeOptions>),
    /// List the concurrency models
    Models {
        /// Only their names, one a line (for scripts)
        #[arg(long, conflicts_with = "json")]
        names: bool,
        /// Each model's name, paper name, summary, capabilities and knobs, as JSON (for scripts)
        #[arg(long)]
        json: bool,
    },
    /// Generate load against a server (open or closed loop; loopback only by default)
    Load(Box<load::LoadArgs>),
    /// Generate workloads: SURGE document trees and request streams, fixed-size files
    Workload(load::WorkloadArgs),
    /// Run the director: a reverse proxy that admits only what the web servers behind it can serve, so overload does not collapse throughput
    Direct(Box<director::DirectOptions>),
    /// Report this host's load to a director, which then admits fewer requests while the host is overloaded
    Monitor(Box<director::MonitorOptions>),
    /// Run experiments: compare the models on your site, rerun the papers' experiments, draw the plots
    Lab(lab::LabArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one per command into DIR
    Manpage {
        /// Write modus.1, modus-serve.1, … into this directory
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
}

/// The command line as shells complete it: a value that names no file or
/// directory (`--compress br,gzip`, a duration, a count) completes to
/// nothing rather than to the file names where the command runs.
fn completable(mut cmd: clap::Command) -> clap::Command {
    let names_files = |arg: &clap::Arg| {
        arg.get_value_names().is_none_or(|names| {
            names.iter().any(|n| ["FILE", "PATH", "ROOT", "DIR"].iter().any(|word| n.contains(word)))
        })
    };
    let values: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| a.get_action().takes_values() && a.get_value_hint() == clap::ValueHint::Unknown)
        .filter(|a| a.get_possible_values().is_empty() && !names_files(a))
        .map(|a| a.get_id().clone())
        .collect();
    for id in values {
        cmd = cmd.mut_arg(id, |a| a.value_hint(clap::ValueHint::Other));
    }
    let subcommands: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in subcommands {
        cmd = cmd.mut_subcommand(name, completable);
    }
    cmd
}

/// A command whose reader went away (`modus serve --check | head -1`)
/// ends as `cat` would, killed by SIGPIPE (exit 141 in a shell), instead of
/// panicking in `println!`: the Rust runtime ignores SIGPIPE, so a write to
/// a closed pipe returns an error every print would have to handle. The
/// servers keep ignoring it: a peer that leaves must cost a socket's write
/// an error, never the process — their sockets are written with
/// `MSG_NOSIGNAL` as well, and so are `load`'s and `lab`'s (std's
/// `TcpStream`), which get the default back here.
#[allow(unsafe_code)] // no safe binding (rustix, nix, signal-hook) restores a default disposition
fn die_quietly_on_closed_stdout() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler (nothing runs in
    // signal context); it is called at the start of `main`, before any
    // thread is started, so no other thread's signal state is changed
    // under it. `tests/cli.rs` (`output_to_a_closed_pipe_ends_quietly`)
    // runs it.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The roles the server starts this binary again for: not commands of the
/// CLI (its help and completions do not offer them), so told apart here,
/// by the first argument, before clap reads the arguments. `None`: none of
/// them was asked for.
fn run_role() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    let rest: Vec<std::ffi::OsString> = args.collect();
    Some(match first.to_str()? {
        // The plain listener beside HTTPS (`--listen` with `--tls-listen`).
        redirect::ARG => redirect::serve(&rest),
        // The keeper `--user` leaves root for.
        transport::keeper::ARG => transport::keeper::serve(&rest),
        // The demo site's CGI programs (`modus demo-cgi NAME`).
        demo_programs::SUBCOMMAND => demo_programs::run(&rest),
        _ => return None,
    })
}

fn main() -> ExitCode {
    if let Some(code) = run_role() {
        return code;
    }
    let cli = Cli::parse();
    let serving = match &cli.command {
        Command::Serve(options) => !options.check,
        Command::Direct(_) | Command::Monitor(_) => true,
        _ => false,
    };
    if !serving {
        die_quietly_on_closed_stdout();
    }
    match cli.command {
        Command::Serve(options) => serve::main(*options),
        Command::Models { json: true, .. } => {
            println!("{}", models_json());
            ExitCode::SUCCESS
        }
        Command::Models { names: true, .. } => {
            for m in models::MODELS {
                println!("{}", m.name);
            }
            ExitCode::SUCCESS
        }
        Command::Models { .. } => {
            // What `--schedule srpt` orders: the link in every model, and
            // the loop's turns where a loop serves many connections.
            for m in models::MODELS {
                let srpt = if m.caps.srpt_loop { "srpt:link+loop" } else { "srpt:link" };
                println!("{:<12} {:<8} {:<15} {}", m.name, m.paper_name, srpt, m.summary);
            }
            ExitCode::SUCCESS
        }
        Command::Load(args) => load::load_main(*args),
        Command::Workload(args) => load::workload_main(args),
        Command::Direct(options) => director::direct_main(*options),
        Command::Monitor(options) => director::monitor_main(*options),
        Command::Lab(args) => lab::lab_main(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut completable(Cli::command()), "modus", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Manpage { out } => match manpages(out.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("modus manpage: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// The manual: the top page on stdout, or every command's page into `dir`.
fn manpages(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    let command = Cli::command();
    let Some(dir) = dir else {
        return page(command, "modus", &mut std::io::stdout());
    };
    std::fs::create_dir_all(dir)?;
    page(command.clone(), "modus", &mut std::fs::File::create(dir.join("modus.1"))?)?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("modus-{}", sub.get_name());
        page(sub.clone(), &name, &mut std::fs::File::create(dir.join(format!("{name}.1")))?)?;
    }
    Ok(())
}

/// One manual page: clap's sections, then SIGNALS (for the commands that
/// serve) and EXIT STATUS, which no flag definition holds.
fn page(command: clap::Command, name: &str, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(command).title(name).render(out)?;
    if matches!(name, "modus" | "modus-serve") {
        out.write_all(SERVE_SIGNALS.as_bytes())?;
    }
    if matches!(name, "modus" | "modus-direct") {
        out.write_all(DIRECT_SIGNALS.as_bytes())?;
    }
    out.write_all(EXIT_STATUS.as_bytes())
}

/// The registry as `modus models --json` prints it: a list of
/// `{name, paper_name, summary, caps: {CAP: bool, …}, knobs: [FLAG, …]}`.
fn models_json() -> serde_json::Value {
    let list = models::MODELS.iter().map(|m| {
        let caps: serde_json::Map<String, serde_json::Value> =
            m.caps.named().into_iter().map(|(cap, on)| (cap.to_string(), on.into())).collect();
        let knobs: Vec<&str> = m.knobs.iter().map(|k| k.flag()).collect();
        serde_json::json!({
            "name": m.name,
            "paper_name": m.paper_name,
            "summary": m.summary,
            "caps": caps,
            "knobs": knobs,
        })
    });
    serde_json::Value::Array(list.collect())
}

/// `modus serve`'s signals, as `pipeline::lifecycle` acts on them.
const SERVE_SIGNALS: &str = r#".SH SIGNALS
\fBmodus serve\fR (the master process, for the process models):
.TP
\fBTERM\fR, \fBINT\fR, \fBQUIT\fR
Stop gracefully: stop accepting, finish the requests in flight (up to \fB\-\-shutdown\-timeout\fR), flush the access log, exit 0.
.TP
\fBHUP\fR
Reload: read the configuration (flags and \fB\-\-config\fR file) again; new workers serve with it while the old ones finish their requests and leave.
A change to what a running server cannot change (\fB\-\-model\fR, \fB\-\-listen\fR, \fB\-\-tls\-listen\fR, \fB\-\-admin\fR, \fB\-\-user\fR) takes a restart: like a configuration that does not read, it is refused, the error log says why, and the logs are reopened and the TLS certificates read again in place.
.TP
\fBUSR1\fR
Reopen the access and error logs (after logrotate has moved them).
.TP
\fBUSR2\fR
Ignored, and said in the error log: no binary upgrade; restart to run a new binary.
"#;

/// `modus direct`'s signals, as `pipeline::lifecycle` acts on them.
const DIRECT_SIGNALS: &str = r#".SH SIGNALS (DIRECTOR)
\fBmodus direct\fR:
.TP
\fBTERM\fR, \fBINT\fR, \fBQUIT\fR
Stop, then exit 0.
.TP
\fBHUP\fR
Read the TLS certificates again (new handshakes present them); the rest of its configuration is read only at start, which the error log says.
.TP
\fBUSR1\fR
Nothing to reopen: the director writes its lines to standard error.
.TP
\fBUSR2\fR
Ignored, and said: no binary upgrade.
"#;

/// What every command's exit status means.
const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success: a server stopped by a signal, a command that did what it was asked.
.TP
\fB1\fR
A failure while running: a server that could not go on, an experiment that failed, a \fBmodus load\fR run in which no request was answered or more than half of the attempts failed.
.TP
\fB2\fR
A usage or configuration error, said on standard error before anything ran: an unknown flag or value, a configuration file that does not read, an address in use, a file that is not there.
.TP
\fB130\fR, \fB143\fR
\fBmodus load\fR stopped by SIGINT or SIGTERM (its report is printed first).
.TP
\fB141\fR
(In a shell.) Killed by SIGPIPE: the reader of its standard output went away (\fBmodus serve \-\-check | head \-1\fR). The commands that serve ignore SIGPIPE.
"#;

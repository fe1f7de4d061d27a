//! `modus`: one web server, every classic concurrency architecture.

mod admin;
mod config;
mod demo_programs;
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
    Models,
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
    /// Run one of the demo site's CGI programs (the server starts them)
    #[command(name = demo_programs::SUBCOMMAND, hide = true)]
    DemoCgi {
        /// spin, echo or env
        name: String,
    },
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let serving = match &cli.command {
        Command::Serve(options) => !options.check,
        Command::Direct(_) | Command::Monitor(_) | Command::DemoCgi { .. } => true,
        _ => false,
    };
    if !serving {
        die_quietly_on_closed_stdout();
    }
    match cli.command {
        Command::Serve(options) => serve::main(*options),
        Command::Models => {
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
            clap_complete::generate(shell, &mut Cli::command(), "modus", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Manpage { out } => match manpages(out.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("modus manpage: {e}");
                ExitCode::FAILURE
            }
        },
        Command::DemoCgi { name } => demo_programs::run(&name),
    }
}

/// The manual: the top page on stdout, or every command's page into `dir`.
fn manpages(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    let command = Cli::command();
    let Some(dir) = dir else {
        return clap_mangen::Man::new(command).render(&mut std::io::stdout());
    };
    std::fs::create_dir_all(dir)?;
    let mut out = std::fs::File::create(dir.join("modus.1"))?;
    clap_mangen::Man::new(command.clone()).render(&mut out)?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("modus-{}", sub.get_name());
        let page = clap_mangen::Man::new(sub.clone()).title(name.clone());
        page.render(&mut std::fs::File::create(dir.join(format!("{name}.1")))?)?;
    }
    Ok(())
}

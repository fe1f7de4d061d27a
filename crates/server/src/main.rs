//! `modus`: one web server, every classic concurrency architecture.

mod admin;
mod config;
mod demo_programs;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Run one of the demo site's CGI programs (the server starts them)
    #[command(name = demo_programs::SUBCOMMAND, hide = true)]
    DemoCgi {
        /// spin, echo or env
        name: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(options) => serve::main(*options),
        Command::Models => {
            for m in models::MODELS {
                println!("{:<12} {:<8} {}", m.name, m.paper_name, m.summary);
            }
            ExitCode::SUCCESS
        }
        Command::Load(args) => load::load_main(*args),
        Command::Workload(args) => load::workload_main(args),
        Command::Direct(options) => director::direct_main(*options),
        Command::Monitor(options) => director::monitor_main(*options),
        Command::Lab(args) => lab::lab_main(args),
        Command::DemoCgi { name } => demo_programs::run(&name),
    }
}

//! `modus direct` and `modus monitor`: paper 002's web-server director.
//!
//! The director is a single-threaded, event-driven reverse proxy that sits
//! in front of an unmodified web server (modus, nginx, Apache, anything
//! speaking HTTP/1.1) and keeps it at peak throughput under overload: it
//! validates every request itself, forwards at most `--max-backend-conns`
//! at a time per backend over pre-opened keep-alive connections, parks the
//! rest in a bounded pending queue and answers the busy page when they wait
//! too long. The monitor (`modus monitor`) runs on the backend host and
//! tells the director when to stop admitting.
//!
//! * [`proxy`] — the event loop and the per-connection state machine
//!   (REQUEST → PEEK → RECEIVE → RESPONSE).
//! * [`backend`] — health, monitor verdict, pool and balancing per backend.
//! * [`forward`], [`response`] — the request and response heads as the
//!   director re-serialises them, with the checks a proxy needs.
//! * [`monitor`] — the monitor daemon and its protocol.
//! * [`admin`] — `--admin`: `/status`, `/status.json`, `/metrics`.
//! * `spill` — a response its client reads slower than the backend sends
//!   it, kept in an unnamed temp file so the backend connection is freed.

#![warn(missing_docs)]

pub mod admin;
pub mod backend;
pub mod forward;
pub mod monitor;
pub mod options;
pub mod proxy;
pub mod relay;
pub mod response;
pub mod scope;
mod spill;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use pipeline::lifecycle::{self, InPlace, Reload};
use signal_hook::iterator::Signals;
use transport::Shutdown;

pub use monitor::MonitorOptions;
pub use options::DirectOptions;

/// Exit status for usage and configuration errors.
const EXIT_CONFIG: u8 = 2;

/// `modus direct`.
pub fn direct_main(options: DirectOptions) -> ExitCode {
    let cfg = match options.config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("modus direct: {e:#}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("modus direct: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cfg: options::Config) -> anyhow::Result<()> {
    raise_open_file_limit();
    let bind = |flag: &str, addr| {
        transport::listener::bind(addr, false)
            .map_err(|e| anyhow::anyhow!(transport::listener::bind_failure(flag, addr, &e)))
    };
    let listener = bind(if cfg.tls.is_some() { "--tls-listen" } else { "--listen" }, cfg.listen)?;
    let https = cfg.tls.is_some();
    let monitor_listener = cfg.monitor_listen.map(|a| bind("--monitor-listen", a)).transpose()?;
    let admin_listener = cfg.admin.map(|a| bind("--admin", a)).transpose()?;
    let admin_addr = admin_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    let local = listener.local_addr()?;
    let monitor_addr = monitor_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    let shutdown = Shutdown::new()?;
    let signals = Signals::new(lifecycle::HANDLED.map(|s| s.as_raw()))?;
    let mut generation = DirectorGeneration {
        log: pipeline::ErrorLog::stderr(),
        tls: cfg.tls.clone(),
        shutdown: shutdown.clone(),
    };
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut signals = signals;
        lifecycle::run(signals.forever(), &mut generation)
    })?;
    let backends: Vec<String> = cfg.backends.iter().map(|(name, _)| name.clone()).collect();
    let mut director = proxy::Director::new(cfg, listener, monitor_listener, admin_listener, shutdown)?;
    {
        // The first stdout line is the contract with scripts and tests.
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "listening on {local} mode=direct backends={} monitor={}{} pid={}{}",
            backends.join(","),
            monitor_addr.map_or("off".to_string(), |a| a.to_string()),
            admin_addr.map_or(String::new(), |a| format!(" admin={a}")),
            std::process::id(),
            if https { " https" } else { "" },
        )?;
        out.flush()?;
    }
    director.run().context("event loop")
}

/// The director as the lifecycle drives it: its configuration is read
/// only at start, so a hangup reads its certificates again, in place.
struct DirectorGeneration {
    log: pipeline::ErrorLog,
    tls: Option<transport::tls::ServerTls>,
    shutdown: Shutdown,
}

impl lifecycle::Generation for DirectorGeneration {
    fn error_log(&self) -> &pipeline::ErrorLog {
        &self.log
    }

    fn stop(&mut self) {
        self.shutdown.trigger();
    }

    fn reload(&mut self) -> std::io::Result<Reload> {
        Ok(Reload::InPlace)
    }

    fn hang_up_in_place(&mut self) -> InPlace {
        let certificates = self.tls.as_ref().filter(|t| t.reloadable()).map(|t| t.reload());
        // Its lines go to stderr: no log file to reopen.
        InPlace { logs: false, certificates }
    }

    fn reopen_logs(&mut self) {}
}

/// `modus monitor`.
pub fn monitor_main(options: MonitorOptions) -> ExitCode {
    monitor::main(options)
}

/// Lifts the soft limit on open descriptors to the hard one: every client
/// and every backend connection is a descriptor.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

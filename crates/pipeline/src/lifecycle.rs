//! The lifecycle of a running server: what each signal an operator may send
//! means, what is said about it, and the one loop that acts on it.
//!
//! Whatever serves — a thread or event model (`models::runtime`), a process
//! model's master (`models::process`) or the director — is a [`Generation`]:
//! the workers of one configuration, which can be stopped, replaced by the
//! next generation when the configuration is read again, or told to reopen
//! their logs. The signals reach [`run`] by whichever route suits the
//! process: a signal thread, or a `signalfd` read between a process
//! master's ticks (a process that forks must have no other thread).
//! Either way a signal means the same, and is said in the same words.
//!
//! It lives here, beside the error log and the TLS certificates it acts
//! on, because both the models and the director build on this crate.
//!
//! # How to add a signal
//!
//! Add it to [`HANDLED`] (so no route leaves it at its default action, and
//! a process model's `signalfd` receives it) and give it its [`Action`] in
//! [`action`]. A new kind of action is a variant of [`Action`], an arm in
//! `obey` with what it says, a method of [`Generation`] each server
//! implements, and an arm in [`obey_in_worker`] if process-model children
//! act on it too; the fake generation in the tests below checks it.

use std::io;

use rustix::process::Signal;

use crate::{ErrorLog, Pipeline};

/// Every signal modus handles on purpose: none is fatal by its default
/// action (a closing terminal sends HUP).
pub const HANDLED: [Signal; 6] =
    [Signal::TERM, Signal::INT, Signal::QUIT, Signal::HUP, Signal::USR1, Signal::USR2];

/// Said on SIGHUP when the configuration was read again and applied.
pub const HUP_RELOADED: &str = "SIGHUP: configuration reloaded: new workers serve with it, the old ones \
    finish their requests and leave";
/// Said on SIGHUP when the logs were reopened in place (no configuration
/// was applied).
pub const HUP_SAID: &str = "SIGHUP: logs reopened";
/// Said on SIGHUP when, in place, the certificates were read again too.
pub const HUP_CERTS_SAID: &str = "SIGHUP: logs reopened, TLS certificates reloaded (new handshakes present \
    them; open connections keep theirs)";
/// Said on SIGHUP by a server with no logs of its own to reopen (the
/// director writes to stderr) when it read its certificates again.
pub const HUP_ONLY_CERTS_SAID: &str =
    "SIGHUP: TLS certificates reloaded (new handshakes present them; open connections keep theirs)";
/// Said on SIGHUP by a server with neither logs nor certificate files.
pub const HUP_IGNORED: &str = "SIGHUP ignored: the configuration is read only at start";
/// Said on SIGHUP when the configuration read again was refused.
pub const HUP_REFUSED: &str = "SIGHUP: configuration not reloaded, the one in force stays";
/// Said on SIGHUP when the certificates read again were refused.
pub const HUP_CERTS_REFUSED: &str = "SIGHUP: TLS certificates not reloaded, the ones in force stay";
/// Said on TERM, INT and QUIT.
pub const STOP_SAID: &str = "stopping: finishing in-flight requests";
/// Said on SIGUSR2 (nginx's binary upgrade), which is ignored.
pub const USR2_SAID: &str = "SIGUSR2 ignored: no binary upgrade (restart modus to run a new binary)";

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// TERM, INT, QUIT: stop gracefully (finish in-flight requests).
    Stop,
    /// HUP: read the configuration again (or, where none applies, reopen
    /// the logs and read the certificates again in place).
    Reload,
    /// USR1: reopen the logs (logrotate).
    ReopenLogs,
    /// USR2: said, and otherwise ignored.
    Ignore,
    /// Not a signal of [`HANDLED`].
    Nothing,
}

/// The meaning of signal number `signo`: the one table.
pub fn action(signo: i32) -> Action {
    match Signal::from_named_raw(signo) {
        Some(Signal::TERM | Signal::INT | Signal::QUIT) => Action::Stop,
        Some(Signal::HUP) => Action::Reload,
        Some(Signal::USR1) => Action::ReopenLogs,
        Some(Signal::USR2) => Action::Ignore,
        _ => Action::Nothing,
    }
}

/// What [`Generation::reload`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// The next generation serves with the configuration read again; this
    /// one finishes its requests and leaves.
    Started,
    /// There is nothing to read the configuration with (or the server is
    /// stopping): the hangup is acted on in place.
    InPlace,
    /// The configuration read again was refused, for this reason; the one
    /// in force stays, and the hangup is acted on in place.
    Refused(String),
    /// The configuration was read, but the next generation did not start
    /// (this reason); the current one serves on, untouched.
    NotStarted(String),
}

/// What [`Generation::hang_up_in_place`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct InPlace {
    /// The server has logs of its own, and reopened them.
    pub logs: bool,
    /// The certificates read again: how many, or why not; `None` where
    /// there are no certificate files.
    pub certificates: Option<Result<usize, String>>,
}

/// The workers of one configuration, as the lifecycle drives them.
pub trait Generation {
    /// Where the lifecycle says what each signal did.
    fn error_log(&self) -> &ErrorLog;
    /// TERM, INT, QUIT: stop accepting and let the requests in flight
    /// finish; the caller of [`run`] waits for them, within its deadline.
    fn stop(&mut self);
    /// HUP: read the configuration again and start the next generation
    /// with it, retiring this one. An error ends the server.
    fn reload(&mut self) -> io::Result<Reload>;
    /// HUP with no new configuration: reopen the logs and read the TLS
    /// certificates again, here and in every worker process.
    fn hang_up_in_place(&mut self) -> InPlace;
    /// USR1: reopen the logs, here and in every worker process.
    fn reopen_logs(&mut self);
}

/// Whether the server goes on after a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Serving on.
    Serve,
    /// [`Generation::stop`] was called: the server is stopping.
    Stop,
}

/// Acts on signal number `signo` for `server` and says what it did — the
/// one place a signal becomes an action.
fn obey(signo: i32, server: &mut impl Generation) -> io::Result<Flow> {
    match action(signo) {
        Action::Stop => {
            server.error_log().info(format_args!("{STOP_SAID}"));
            // Type=notify: the service manager knows the stop is under way.
            let _ = transport::systemd::notify("STOPPING=1");
            server.stop();
            return Ok(Flow::Stop);
        }
        Action::Reload => {
            // The service manager learns that a reload runs, then when it is done.
            let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
            let _ = transport::systemd::notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
            match server.reload()? {
                Reload::Started => server.error_log().info(format_args!("{HUP_RELOADED}")),
                Reload::NotStarted(e) => server.error_log().error(format_args!(
                    "SIGHUP: the new workers did not start ({e}); the old ones serve on"
                )),
                Reload::Refused(why) => {
                    server.error_log().error(format_args!("{HUP_REFUSED}: {why}"));
                    hang_up_in_place(server);
                }
                Reload::InPlace => hang_up_in_place(server),
            }
            let _ = transport::systemd::notify("READY=1");
        }
        Action::ReopenLogs => server.reopen_logs(),
        Action::Ignore => server.error_log().info(format_args!("{USR2_SAID}")),
        Action::Nothing => {}
    }
    Ok(Flow::Serve)
}

fn hang_up_in_place(server: &mut impl Generation) {
    let done = server.hang_up_in_place();
    let log = server.error_log();
    match (done.logs, done.certificates) {
        (_, Some(Err(e))) => log.error(format_args!("{HUP_CERTS_REFUSED}: {e}")),
        (true, None) => log.info(format_args!("{HUP_SAID}")),
        (true, Some(Ok(_))) => log.info(format_args!("{HUP_CERTS_SAID}")),
        (false, Some(Ok(_))) => log.info(format_args!("{HUP_ONLY_CERTS_SAID}")),
        (false, None) => log.info(format_args!("{HUP_IGNORED}")),
    }
}

/// Obeys every signal `signals` yields until one stops the server
/// ([`Flow::Stop`]; those after it are left) or they end ([`Flow::Serve`]:
/// a process master's batch read from its `signalfd` was obeyed, or a
/// signal thread's source was closed, as a thread model's runtime does
/// when its model returned by itself).
pub fn run(signals: impl IntoIterator<Item = i32>, server: &mut impl Generation) -> io::Result<Flow> {
    for signo in signals {
        if obey(signo, server)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
    }
    Ok(Flow::Serve)
}

/// A process-model child's share of signal `signo` (a hangup reaches the
/// whole process group, and the master speaks for the server): it acts on
/// `p` and says nothing.
pub fn obey_in_worker(signo: i32, p: &Pipeline) -> Flow {
    match action(signo) {
        Action::Stop => return Flow::Stop,
        Action::Reload => {
            // Every process tries and keeps its old set; the master says why.
            let _ = reread_certificates(p);
            reopen_logs(p);
        }
        Action::ReopenLogs => reopen_logs(p),
        Action::Ignore | Action::Nothing => {}
    }
    Flow::Serve
}

/// `p`'s certificates read again, where they come from files.
pub fn reread_certificates(p: &Pipeline) -> Option<Result<usize, String>> {
    p.tls.as_ref().filter(|tls| tls.reloadable()).map(|tls| tls.reload())
}

/// Reopens `p`'s access and error logs at their paths.
pub fn reopen_logs(p: &Pipeline) {
    for e in [p.access_log.reopen().err(), p.error_log.reopen().err()].into_iter().flatten() {
        p.error_log.error(format_args!("reopening logs: {e}"));
    }
}

/// [`Generation::hang_up_in_place`] for this process's pipeline `p`: its
/// certificates read again, its logs reopened.
pub fn hang_up_pipeline(p: &Pipeline) -> InPlace {
    let certificates = reread_certificates(p);
    reopen_logs(p);
    InPlace { logs: true, certificates }
}

#[cfg(test)]
mod tests;

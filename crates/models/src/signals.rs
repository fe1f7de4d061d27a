//! What each signal an operator may send means — one table for every model.
//!
//! The signals arrive by two routes, because a process that forks must have
//! no threads when it does: thread models read them on a thread of
//! `modus serve` (signal_hook), process models on a `signalfd` in the
//! master and in each child (`process/`). Both routes hand the number to
//! [`obey`], so a signal means the same whichever model runs.

use pipeline::Pipeline;
use rustix::process::Signal;

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
/// Said on SIGUSR2 (nginx's binary upgrade), which is ignored.
pub const USR2_SAID: &str = "SIGUSR2 ignored: no binary upgrade (restart modus to run a new binary)";

/// What is left for the caller once [`obey`] has acted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Obeyed {
    /// TERM, INT, QUIT: stop gracefully (finish in-flight requests).
    Stop,
    /// USR1 (and HUP in a child): the logs were reopened (a master also asks its children).
    LogsReopened,
    /// HUP to the server: read the configuration again ([`crate::Reload`]),
    /// or, where that is not possible, call [`hangup_in_place`]; then
    /// [`reloaded`] tells the service manager it is done.
    Reload,
    /// Nothing more to do (USR2, or a signal not in [`HANDLED`]).
    Nothing,
}

/// Who receives a signal: the process that speaks for the server, or a
/// process-model child (a hangup reaches the whole process group, and the
/// master says what it means once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    /// `modus serve`'s process, or a process model's master.
    Server,
    /// A process-model child: acts, says nothing.
    Child,
}

/// Acts on signal number `signo` for `p`: says what it means in the error
/// log, reopens the logs on USR1 (and on HUP in a child), and returns what
/// is left to do — on HUP to the server, the reload.
pub fn obey(signo: i32, p: &Pipeline, voice: Voice) -> Obeyed {
    let say = |what: &str| {
        if voice == Voice::Server {
            p.error_log.info(format_args!("{what}"));
        }
    };
    match Signal::from_named_raw(signo) {
        Some(Signal::TERM | Signal::INT | Signal::QUIT) => {
            say("stopping: finishing in-flight requests");
            if voice == Voice::Server {
                // Type=notify: the service manager knows the stop is under way.
                let _ = transport::systemd::notify("STOPPING=1");
            }
            Obeyed::Stop
        }
        Some(Signal::HUP) if voice == Voice::Server => {
            // The service manager learns that a reload runs (and, from
            // `reloaded`, when it is done).
            let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
            let _ = transport::systemd::notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
            Obeyed::Reload
        }
        Some(Signal::HUP) => {
            hangup_in_place(p, voice);
            Obeyed::LogsReopened
        }
        Some(Signal::USR1) => {
            reopen_logs(p);
            Obeyed::LogsReopened
        }
        Some(Signal::USR2) => {
            say(USR2_SAID);
            Obeyed::Nothing
        }
        _ => Obeyed::Nothing,
    }
}

/// SIGHUP without a new configuration (none can be read here, or the one
/// read was refused): reopens the logs and reads the TLS certificates again.
pub fn hangup_in_place(p: &Pipeline, voice: Voice) {
    match p.tls.as_ref().filter(|tls| tls.reloadable()).map(|tls| tls.reload()) {
        None if voice == Voice::Server => p.error_log.info(format_args!("{HUP_SAID}")),
        Some(Ok(_)) if voice == Voice::Server => p.error_log.info(format_args!("{HUP_CERTS_SAID}")),
        // Every process tries and keeps its old set: one says why.
        Some(Err(e)) if voice == Voice::Server => p
            .error_log
            .error(format_args!("SIGHUP: TLS certificates not reloaded, the ones in force stay: {e}")),
        _ => {}
    }
    reopen_logs(p);
}

/// Tells the service manager (Type=notify) that the reload SIGHUP started is over.
pub fn reloaded() {
    let _ = transport::systemd::notify("READY=1");
}

fn reopen_logs(p: &Pipeline) {
    for e in [p.access_log.reopen().err(), p.error_log.reopen().err()].into_iter().flatten() {
        p.error_log.error(format_args!("reopening logs: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::accesslog::{AccessLog, LogTarget};
    use pipeline::{ErrorLog, Settings, Site};
    use std::sync::Arc;

    #[test]
    fn each_handled_signal_has_its_meaning() {
        let dir = tempfile::tempdir().unwrap();
        let (access, errors) = (dir.path().join("access.log"), dir.path().join("error.log"));
        let p = Pipeline::new(
            Settings::default(),
            Site::embedded(&[]),
            Arc::new(AccessLog::open(LogTarget::File(access.clone())).unwrap()),
            Arc::new(ErrorLog::open(LogTarget::File(errors.clone())).unwrap()),
        );
        let obeyed: Vec<Obeyed> = HANDLED.iter().map(|s| obey(s.as_raw(), &p, Voice::Server)).collect();
        use Obeyed::*;
        assert_eq!(obeyed, [Stop, Stop, Stop, Reload, LogsReopened, Nothing]);
        assert_eq!(obey(Signal::HUP.as_raw(), &p, Voice::Child), LogsReopened, "a child reopens in place");
        assert_eq!(obey(Signal::CHILD.as_raw(), &p, Voice::Server), Nothing);
        hangup_in_place(&p, Voice::Server);
        let said = std::fs::read_to_string(&errors).unwrap();
        assert!(said.contains(HUP_SAID) && said.contains(USR2_SAID), "{said}");
        assert_eq!(said.matches("stopping").count(), 3, "{said}");

        // Moved away (logrotate), then USR1: a new file in its place.
        std::fs::rename(&access, dir.path().join("access.log.1")).unwrap();
        assert_eq!(obey(Signal::USR1.as_raw(), &p, Voice::Child), LogsReopened);
        assert!(access.exists(), "reopened at its path");
        let child_said = std::fs::read_to_string(&errors).unwrap();
        assert!(!child_said[said.len()..].contains("SIG"), "a child says nothing");
    }
}

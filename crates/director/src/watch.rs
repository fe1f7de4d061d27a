//! What the operator is told: every change in a backend's state, and why,
//! in the error log (standard error). Without it a director can answer
//! every request with 503 while both logs stay silent.
//!
//! The loop changes backends in many places (health checks, passive
//! failures, connection attempts, monitor reports, the tick); rather than
//! a log line at each, [`Watch::report`] compares what it last said of
//! each backend with its state now, once per turn of the loop, so no
//! change can go unsaid and none is said twice.

use pipeline::ErrorLog;

use crate::backend::{Backend, MonitorState};

/// What was last said of one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Said {
    up: bool,
    monitor: MonitorState,
}

impl Said {
    fn of(b: &Backend) -> Said {
        Said { up: b.up, monitor: b.monitor }
    }
}

/// The backends' states as last logged.
#[derive(Debug)]
pub(crate) struct Watch {
    said: Vec<Said>,
    log: ErrorLog,
}

impl Watch {
    /// Starts from the backends' initial states, which the start-up lines state.
    pub(crate) fn new(backends: &[Backend]) -> Watch {
        Watch { said: backends.iter().map(Said::of).collect(), log: ErrorLog::stderr() }
    }

    /// Says (once a minute) that accepting on a listener failed and pauses.
    pub(crate) fn accept_paused(&self, e: &std::io::Error) {
        self.log.accept_paused(e);
    }

    /// Logs every change since the last call.
    pub(crate) fn report(&mut self, backends: &[Backend]) {
        for (b, said) in backends.iter().zip(self.said.iter_mut()) {
            let now = Said::of(b);
            if now == *said {
                continue;
            }
            if now.up != said.up {
                if now.up {
                    self.log.info(format_args!("backend {} ({}) is up: back in rotation", b.name, b.addr));
                } else {
                    self.log.warn(format_args!(
                        "backend {} ({}) is down: {}; its requests go to the other backends, or get 502/503",
                        b.name, b.addr, b.down_reason
                    ));
                }
            }
            if now.monitor != said.monitor {
                let detail = if b.monitor_detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", b.monitor_detail)
                };
                match now.monitor {
                    MonitorState::Overloaded => self.log.warn(format_args!(
                        "backend {}: its monitor reports overload{detail}: no new requests are admitted (limit 0) \
                         until it reports recovery",
                        b.name
                    )),
                    MonitorState::Serviceable if said.monitor == MonitorState::Overloaded => self
                        .log
                        .info(format_args!("backend {}: its monitor reports recovery{detail}: admitting again", b.name)),
                    MonitorState::Serviceable => {
                        self.log.info(format_args!("backend {}: its monitor reports{detail}", b.name))
                    }
                    MonitorState::Unknown => self.log.warn(format_args!(
                        "backend {}: its monitor is silent (not connected, or no report for three intervals): \
                         admitting half the limit until it reports",
                        b.name
                    )),
                    MonitorState::Off => {}
                }
            }
            *said = now;
        }
    }

    /// A response could not be kept in a temp file: said at most once a
    /// minute per kind of failure (a full or read-only `$TMPDIR` fails
    /// every response).
    pub(crate) fn spill_failed(&self, what: &str, e: &std::io::Error) {
        let dir = std::env::temp_dir();
        self.log.error_once(
            &format!("spill {what} {:?}", e.kind()),
            format_args!(
                "cannot {what} a temp file in {} to buffer a response: {e}; {}",
                dir.display(),
                if what == "create" {
                    "it goes at the client's pace, holding its backend connection"
                } else {
                    "its client's connection is closed"
                }
            ),
        );
    }

    /// A connection to `b` could not be opened: said at most once a
    /// minute per backend (a down backend is retried every health interval).
    pub(crate) fn connect_failed(&self, b: &Backend, why: &str) {
        self.log.warn_once(
            &format!("connect {}", b.name),
            format_args!("backend {} ({}): cannot connect: {why}", b.name, b.addr),
        );
    }
}

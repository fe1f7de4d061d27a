use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::accesslog::{AccessLog, LogTarget};
use crate::{Settings, Site};

const TERM: i32 = Signal::TERM.as_raw();
const QUIT: i32 = Signal::QUIT.as_raw();
const HUP: i32 = Signal::HUP.as_raw();
const USR1: i32 = Signal::USR1.as_raw();
const USR2: i32 = Signal::USR2.as_raw();

/// A server whose generations are numbers: it records what the lifecycle
/// asked of which generation, and each generation writes its own log file.
struct Fake {
    dir: PathBuf,
    generation: u32,
    log: ErrorLog,
    /// What the next reloads return, in order.
    reloads: VecDeque<io::Result<Reload>>,
    in_place: InPlace,
    asked: Vec<String>,
}

impl Fake {
    fn new(dir: &Path, reloads: impl IntoIterator<Item = io::Result<Reload>>) -> Fake {
        Fake {
            dir: dir.to_path_buf(),
            generation: 1,
            log: Fake::log_of(dir, 1),
            reloads: reloads.into_iter().collect(),
            in_place: InPlace { logs: true, certificates: None },
            asked: Vec::new(),
        }
    }

    fn log_of(dir: &Path, generation: u32) -> ErrorLog {
        ErrorLog::open(LogTarget::File(dir.join(format!("error-{generation}.log")))).unwrap()
    }

    /// What generation `generation`'s log says.
    fn said(&self, generation: u32) -> String {
        std::fs::read_to_string(self.dir.join(format!("error-{generation}.log"))).unwrap_or_default()
    }

    fn ask(&mut self, what: &str) {
        self.asked.push(format!("{what} {}", self.generation));
    }
}

impl Generation for Fake {
    fn error_log(&self) -> &ErrorLog {
        &self.log
    }

    fn stop(&mut self) {
        self.ask("stop");
    }

    fn reload(&mut self) -> io::Result<Reload> {
        self.ask("reload");
        let outcome = self.reloads.pop_front().expect("a reload outcome for each HUP");
        if let Ok(Reload::Started) = outcome {
            self.generation += 1;
            self.log = Fake::log_of(&self.dir, self.generation);
        }
        outcome
    }

    fn hang_up_in_place(&mut self) -> InPlace {
        self.ask("in place");
        InPlace { logs: self.in_place.logs, certificates: self.in_place.certificates.clone() }
    }

    fn reopen_logs(&mut self) {
        self.ask("reopen logs");
    }
}

#[test]
fn each_handled_signal_has_its_action() {
    let actions: Vec<Action> = HANDLED.iter().map(|s| action(s.as_raw())).collect();
    use Action::*;
    assert_eq!(actions, [Stop, Stop, Stop, Reload, ReopenLogs, Ignore]);
    assert_eq!(action(Signal::CHILD.as_raw()), Nothing);
}

#[test]
fn the_loop_acts_on_each_signal_until_one_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), []);
    let flow = run([USR1, USR2, Signal::CHILD.as_raw(), QUIT, HUP, TERM], &mut server).unwrap();
    assert_eq!(flow, Flow::Stop);
    assert_eq!(server.asked, ["reopen logs 1", "stop 1"], "nothing after the stop is obeyed");
    let said = server.said(1);
    assert!(said.contains(USR2_SAID) && said.contains(STOP_SAID), "{said}");
    assert_eq!(said.matches("SIG").count(), 1, "USR1 reopens silently: {said}");
}

#[test]
fn signals_that_end_without_a_stop_end_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), []);
    assert_eq!(run([USR1], &mut server).unwrap(), Flow::Serve);
    assert_eq!(server.asked, ["reopen logs 1"]);
}

#[test]
fn a_started_reload_is_said_by_the_new_generation_which_a_later_term_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), [Ok(Reload::Started)]);
    // TERM queued while the reload ran: obeyed once it is done.
    assert_eq!(run([HUP, TERM], &mut server).unwrap(), Flow::Stop);
    assert_eq!(server.asked, ["reload 1", "stop 2"]);
    assert!(server.said(2).contains(HUP_RELOADED), "{}", server.said(2));
    assert!(!server.said(1).contains("SIGHUP"), "{}", server.said(1));
}

#[test]
fn a_refused_reload_keeps_the_generation_and_hangs_up_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), [Ok(Reload::Refused("line 3: no such key".into()))]);
    assert_eq!(obey(HUP, &mut server).unwrap(), Flow::Serve);
    assert_eq!(server.asked, ["reload 1", "in place 1"]);
    let said = server.said(1);
    assert!(said.contains(&format!("{HUP_REFUSED}: line 3: no such key")), "{said}");
    assert!(said.contains(HUP_SAID) && !said.contains(HUP_RELOADED), "{said}");
}

#[test]
fn new_workers_that_do_not_start_leave_the_old_ones_serving_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), [Ok(Reload::NotStarted("no threads".into()))]);
    assert_eq!(obey(HUP, &mut server).unwrap(), Flow::Serve);
    assert_eq!(server.asked, ["reload 1"], "no hang-up in place either");
    let said = server.said(1);
    assert!(said.contains("the new workers did not start (no threads); the old ones serve on"), "{said}");
}

#[test]
fn a_reload_that_fails_ends_the_loop_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Fake::new(dir.path(), [Err(io::Error::other("fork: out of memory"))]);
    let err = run([HUP, USR1], &mut server).unwrap_err();
    assert_eq!(err.to_string(), "fork: out of memory");
    assert_eq!(server.asked, ["reload 1"], "nothing obeyed after it");
}

#[test]
fn a_hang_up_in_place_says_what_was_read_again() {
    let cases = [
        (InPlace { logs: true, certificates: None }, HUP_SAID),
        (InPlace { logs: true, certificates: Some(Ok(2)) }, HUP_CERTS_SAID),
        (InPlace { logs: false, certificates: Some(Ok(1)) }, HUP_ONLY_CERTS_SAID),
        (InPlace { logs: false, certificates: None }, HUP_IGNORED),
        (InPlace { logs: false, certificates: Some(Err("key.pem: no key".into())) }, HUP_CERTS_REFUSED),
    ];
    for (in_place, text) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Fake::new(dir.path(), [Ok(Reload::InPlace)]);
        server.in_place = in_place;
        assert_eq!(obey(HUP, &mut server).unwrap(), Flow::Serve);
        assert_eq!(server.asked, ["reload 1", "in place 1"]);
        let said = server.said(1);
        assert_eq!(said.matches("SIGHUP").count(), 1, "{said}");
        assert!(said.contains(text), "{text:?} not in {said}");
    }
}

#[test]
fn a_worker_acts_on_its_signals_and_says_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (access, errors) = (dir.path().join("access.log"), dir.path().join("error.log"));
    let p = Pipeline::new(
        Settings::default(),
        Site::embedded(&[]),
        Arc::new(AccessLog::open(LogTarget::File(access.clone())).unwrap()),
        Arc::new(ErrorLog::open(LogTarget::File(errors.clone())).unwrap()),
    );
    let flows: Vec<Flow> = HANDLED.iter().map(|s| obey_in_worker(s.as_raw(), &p)).collect();
    use Flow::*;
    assert_eq!(flows, [Stop, Stop, Stop, Serve, Serve, Serve]);
    assert_eq!(std::fs::read_to_string(&errors).unwrap_or_default(), "", "a worker says nothing");

    // Moved away (logrotate), then USR1, or HUP: a new file in its place.
    for signo in [USR1, HUP] {
        std::fs::rename(&access, dir.path().join("access.log.1")).unwrap();
        assert_eq!(obey_in_worker(signo, &p), Serve);
        assert!(access.exists(), "reopened at its path");
    }
    assert_eq!(hang_up_pipeline(&p), InPlace { logs: true, certificates: None });
}

//! Concurrency models: who accepts connections, who runs the request
//! pipeline, where work waits. Each model is one file that only schedules;
//! the protocol lives in `pipeline::Connection` and is the same for all.
//!
//! Adding a model = one file + one line in the registry ([`each_model!`]).
#![warn(missing_docs)]

mod accept;
mod amped;
mod board;
mod event;
mod gate;
mod handoff;
mod helpers;
mod loop_core;
mod per_request;
mod perchild;
mod pool;
mod prefork;
mod process;
pub mod runtime;
mod staged;
// The kernel reads and writes the loop's buffers between a submission and
// its completion, which no borrow can express: every `unsafe` block there
// says what keeps them alive and in place.
#[allow(unsafe_code)]
mod uring;
mod worker;

use std::io;
use std::net::TcpListener;
use std::sync::Arc;

use pipeline::stats::Snapshot;
use pipeline::Pipeline;
use transport::Shutdown;

/// What a model is, for tests, the lab and the CLI — which ask for a
/// capability, never for a name.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caps {
    /// Runs connections in child processes (tests start it as a binary).
    pub forks: bool,
    /// Non-blocking sockets driven by readiness events.
    pub event_driven: bool,
    /// Splits the pipeline into stages with queues between them.
    pub staged: bool,
    /// Under `--schedule srpt`, orders the connections its loop serves too
    /// (every model orders the outgoing link through socket priorities).
    pub srpt_loop: bool,
    /// Whether a file goes out with `sendfile` from the file rather than
    /// from memory (see [`ModelInfo::sends_files`]).
    pub sendfile: Sendfile,
    /// Runs the request pipeline on its event loop's thread (not on
    /// helpers), so CPU work there — a first encoding — stalls every
    /// connection of the loop.
    pub pipeline_on_loop: bool,
    /// A worker holds each connection for its whole life, idle keep-alive
    /// included, so past its `--max-clients` workers clients wait to be
    /// accepted while the server may idle (paper 001's MaxClients; the lab
    /// counts those slots).
    pub holds_connection: bool,
}

/// How a model's files go out, as it declares. Not comparable: a function
/// pointer's address says nothing.
#[derive(Clone, Copy, Debug, Default)]
pub enum Sendfile {
    /// It writes to the socket itself: from the file, with `sendfile`.
    Always,
    /// From memory: it reads them to send them.
    #[default]
    Never,
    /// Chosen at run time (an experiment knob): the function says whether
    /// from the file. `modus models --json` reports it as not declared.
    Probed(fn() -> bool),
}

impl Caps {
    /// Each capability by the name `modus models --json` gives it.
    pub fn named(&self) -> [(&'static str, bool); 7] {
        [
            ("forks", self.forks),
            ("event_driven", self.event_driven),
            ("staged", self.staged),
            ("srpt_loop", self.srpt_loop),
            ("sendfile", matches!(self.sendfile, Sendfile::Always)),
            ("pipeline_on_loop", self.pipeline_on_loop),
            ("holds_connection", self.holds_connection),
        ]
    }
}

/// A [`Tuning`] knob, named as its `modus serve` flag is (without `--`).
/// A model lists the ones that shape it ([`ModelInfo::knobs`]); the status
/// page and `modus models --json` show those.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// [`Tuning::threads`].
    Threads,
    /// [`Tuning::queue`].
    Queue,
    /// [`Tuning::workers`].
    Workers,
    /// [`Tuning::helpers`].
    Helpers,
    /// [`Tuning::max_threads`].
    MaxThreads,
    /// [`Tuning::stage_threads`].
    StageThreads,
    /// [`Tuning::processes`].
    Processes,
    /// [`Tuning::min_spare`].
    MinSpare,
    /// [`Tuning::max_spare`].
    MaxSpare,
    /// [`Tuning::start_servers`].
    StartServers,
    /// [`Tuning::max_clients`].
    MaxClients,
    /// [`Tuning::threads_per_child`].
    ThreadsPerChild,
    /// [`Tuning::max_connections`].
    MaxConnections,
    /// [`Tuning::reuseport`].
    Reuseport,
}

impl Knob {
    /// Its `modus serve` flag, without `--` (also its config-file key).
    pub fn flag(self) -> &'static str {
        match self {
            Knob::Threads => "threads",
            Knob::Queue => "queue",
            Knob::Workers => "workers",
            Knob::Helpers => "helpers",
            Knob::MaxThreads => "max-threads",
            Knob::StageThreads => "stage-threads",
            Knob::Processes => "processes",
            Knob::MinSpare => "min-spare",
            Knob::MaxSpare => "max-spare",
            Knob::StartServers => "start-servers",
            Knob::MaxClients => "max-clients",
            Knob::ThreadsPerChild => "threads-per-child",
            Knob::MaxConnections => "max-connections",
            Knob::Reuseport => "reuseport",
        }
    }

    /// Its value in `t`, as the flag would take it.
    pub fn value(self, t: &Tuning) -> String {
        match self {
            Knob::Threads => t.threads.to_string(),
            Knob::Queue => t.queue.to_string(),
            Knob::Workers => t.workers.to_string(),
            Knob::Helpers => t.helpers.to_string(),
            Knob::MaxThreads => t.max_threads.to_string(),
            Knob::StageThreads => t.stage_threads.clone(),
            Knob::Processes => t.processes.to_string(),
            Knob::MinSpare => t.min_spare.to_string(),
            Knob::MaxSpare => t.max_spare.to_string(),
            Knob::StartServers => t.start_servers.to_string(),
            Knob::MaxClients => t.max_clients.to_string(),
            Knob::ThreadsPerChild => t.threads_per_child.to_string(),
            Knob::MaxConnections => t.max_connections.to_string(),
            Knob::Reuseport => t.reuseport.to_string(),
        }
    }
}

/// Tuning knobs; each model reads the ones that apply to it.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Worker threads (per process, where there are processes).
    pub threads: usize,
    /// Connections with a whole request that may wait for a worker (the
    /// gate → threads queue; per stage for `staged`).
    pub queue: usize,
    /// Event loops (one thread each) for the event-driven models.
    pub workers: usize,
    /// Helper threads that run blocking work for an event loop (`amped`).
    pub helpers: usize,
    /// Safety cap on threads for `per-request`: beyond it, 503.
    pub max_threads: usize,
    /// Threads per stage for `staged`, e.g. `read=2,data=2,cgi=4,write=2,log=1`.
    pub stage_threads: String,
    /// Fixed process count (`perchild`).
    pub processes: usize,
    /// Fewest idle workers kept ready (processes for `prefork`, threads for `worker`/`perchild`).
    pub min_spare: usize,
    /// Most idle workers kept; extra ones are retired.
    pub max_spare: usize,
    /// Child processes forked at start (`prefork`, `worker`; Apache's
    /// StartServers); 0: as many as `min_spare` needs.
    pub start_servers: usize,
    /// Most connections served at once across all processes (Apache's MaxClients).
    pub max_clients: usize,
    /// Threads in each child process (`worker`; the upper bound for `perchild`).
    pub threads_per_child: usize,
    /// Most open client connections, server-wide, for the models that hold
    /// connections without a thread or process each (`event`, `amped`,
    /// `staged`); at the cap they stop accepting and newcomers wait in the
    /// kernel's backlog (nginx's `worker_connections`).
    pub max_connections: usize,
    /// `event`/`amped`: one listener per loop, bound with `SO_REUSEPORT`
    /// (nginx's `listen ... reuseport`), so loops take connections from
    /// accept queues of their own instead of waking on one shared socket.
    pub reuseport: bool,
    /// Time in-flight requests get after a stop request (process models
    /// enforce it on their children; the server enforces it for the others).
    pub shutdown_timeout: std::time::Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        // Blocking models hold a thread per open connection, keep-alive
        // included, so the pool must exceed the clients a benchmark opens
        // (wrk's 50 by default; Apache worker runs 25 per child × 16).
        Tuning {
            threads: 128,
            queue: 1024,
            workers: 1,
            helpers: 4,
            max_threads: 4096,
            stage_threads: "read=2,data=2,cgi=4,write=2,log=1".into(),
            processes: 2,
            // Apache's prefork defaults: MinSpareServers 5, MaxSpareServers
            // 10, MaxRequestWorkers 256; worker's ThreadsPerChild 25.
            min_spare: 5,
            max_spare: 10,
            start_servers: 0,
            max_clients: 256,
            threads_per_child: 25,
            // The server lifts its open-file limit to the hard maximum
            // (often 2^19 or 2^20), so the descriptor limit no longer bounds
            // the event models in practice: this does. 10k is C10k, ten
            // times nginx's stock `worker_connections 1024`, and leaves
            // descriptors for files, CGI pipes and logs under any hard limit
            // of 64k or more; memory stays small because idle keep-alive
            // connections hold no read buffer.
            max_connections: 10_000,
            reuseport: false,
            shutdown_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// Everything a model gets; nothing else is global.
pub struct ModelEnv {
    /// Bound and listening.
    pub listener: TcpListener,
    /// The shared request core.
    pub pipeline: Arc<Pipeline>,
    /// Fires on SIGTERM/SIGINT; the model stops accepting, lets in-flight
    /// requests finish and returns.
    pub shutdown: Shutdown,
    /// Knobs.
    pub tuning: Tuning,
    /// `--admin` for the models that fork (`Caps.forks`); the others get
    /// `None` and the server runs their admin listener on a thread of its
    /// own, reading the one process's stats.
    pub admin: Option<Admin>,
    /// What SIGHUP runs to read the configuration again; `None`: HUP only
    /// reopens the logs and reads the certificates again.
    pub reload: Option<Reload>,
}

impl std::fmt::Debug for ModelEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelEnv")
            .field("listener", &self.listener)
            .field("tuning", &self.tuning)
            .field("admin", &self.admin)
            .field("reload", &self.reload.is_some())
            .finish_non_exhaustive()
    }
}

/// Reads the configuration again and builds what serves with it, or says
/// why it cannot (the configuration in force then stays). Called by the
/// runtime (thread models) or the master (process models) on SIGHUP; it
/// must start no thread (a process model's master forks afterwards).
pub type Reload = Arc<dyn Fn() -> Result<Reloaded, String> + Send + Sync>;

/// A configuration read again: the new generation of workers serves with it.
#[derive(Debug)]
pub struct Reloaded {
    /// The request core built from it (new logs, cache, settings; the
    /// statistics carry on).
    pub pipeline: Arc<Pipeline>,
    /// Its knobs.
    pub tuning: Tuning,
}

/// What serves the admin listener, given a way to read the whole server's
/// statistics. Runs until its process is killed.
pub type AdminServer = dyn Fn(TcpListener, &dyn Fn() -> Snapshot, &Shutdown) + Send + Sync;

/// `--admin` for a process model: the master forks an *admin child* (and
/// forks it again if it dies) that serves `listener` with `serve`, reading
/// every worker child's statistics from shared memory (`board.rs`). The
/// master itself stays single-threaded because it forks.
pub struct Admin {
    /// Bound, listening.
    pub listener: TcpListener,
    /// The server.
    pub serve: Arc<AdminServer>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("listener", &self.listener).finish_non_exhaustive()
    }
}

/// A registered model.
#[derive(Debug)]
pub struct ModelInfo {
    /// The `--model` value.
    pub name: &'static str,
    /// The papers' name for it.
    pub paper_name: &'static str,
    /// One line for `--help` and the docs.
    pub summary: &'static str,
    /// What it does, for tests and the lab.
    pub caps: Caps,
    /// The knobs that size it, in the order its status page lists them.
    pub knobs: &'static [Knob],
    /// Serves until `env.shutdown` fires.
    pub run: fn(ModelEnv) -> io::Result<()>,
}

impl ModelInfo {
    /// Whether a file goes out from the file rather than from memory, as
    /// [`Caps::sendfile`] declares or probes. The server then keeps fewer
    /// files as bytes.
    pub fn sends_files(&self) -> bool {
        match self.caps.sendfile {
            Sendfile::Always => true,
            Sendfile::Never => false,
            Sendfile::Probed(probe) => probe(),
        }
    }
}

/// The registry: every model's module and `--model` name, one line each,
/// in the order tables list them (threads, processes, event loops).
/// It calls `$then! { module => "name", … }`, so whatever needs a model
/// per item — [`MODELS`] here, a module of tests per model in the
/// conformance suite and the reload tests — is written from this one list.
/// Adding a model = its file + one line here. After a comma, more lines
/// may follow the list (`registry_tests` adds a test-only model so).
#[macro_export]
macro_rules! each_model {
    ($then:ident $(, $($more:tt)*)?) => {
        $then! {
            per_request => "per-request",
            pool => "pool",
            staged => "staged",
            prefork => "prefork",
            worker => "worker",
            perchild => "perchild",
            event => "event",
            amped => "amped",
            uring => "uring",
            $($($more)*)?
        }
    };
}

macro_rules! registry {
    ($($module:ident => $name:literal),* $(,)?) => {
        /// The one list of models (the registry, [`each_model!`]).
        pub const MODELS: &[ModelInfo] = &[$($module::MODEL),*];

        /// Each registry line's name is its model's own.
        #[cfg(test)]
        const REGISTERED: &[(&str, &str)] = &[$(($name, $module::MODEL.name)),*];
    };
}
each_model!(registry);

/// Looks a model up by its `--model` name.
pub fn find(name: &str) -> Option<&'static ModelInfo> {
    MODELS.iter().find(|m| m.name == name)
}

/// The model names, for messages.
pub fn names() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.name).collect()
}

/// A test-only model: what adding a model takes (this file and one
/// registry line in `registry_tests`).
#[cfg(test)]
mod trivial;

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn every_registry_line_names_its_model_and_every_name_is_one_model() {
        for (registered, own) in REGISTERED {
            assert_eq!(registered, own, "the registry line and the model's MODEL.name differ");
            assert_eq!(find(registered).map(|m| m.name), Some(*own));
        }
        let mut names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MODELS.len(), "a name registered twice");
    }

    /// The knobs each model's status page lists (in this order), as it did
    /// when serve.rs chose them by name.
    #[test]
    fn each_model_declares_the_knobs_that_size_it() {
        let sized_by: [(&str, &[&str]); 9] = [
            ("per-request", &["max-threads"]),
            ("pool", &["threads", "queue"]),
            ("staged", &["stage-threads", "queue", "max-connections"]),
            ("prefork", &["max-clients", "min-spare", "max-spare"]),
            ("worker", &["max-clients", "min-spare", "max-spare", "threads-per-child"]),
            ("perchild", &["processes", "min-spare", "max-spare", "threads-per-child"]),
            ("event", &["workers", "max-connections"]),
            ("amped", &["workers", "helpers", "max-connections"]),
            ("uring", &["workers", "max-connections"]),
        ];
        let declared: Vec<(&str, Vec<&str>)> =
            MODELS.iter().map(|m| (m.name, m.knobs.iter().map(|k| k.flag()).collect())).collect();
        let expected: Vec<(&str, Vec<&str>)> = sized_by.iter().map(|(m, k)| (*m, k.to_vec())).collect();
        assert_eq!(declared, expected);
        let t = Tuning { processes: 3, stage_threads: "read=1".into(), ..Tuning::default() };
        assert_eq!(Knob::Processes.value(&t), "3");
        assert_eq!(Knob::StageThreads.value(&t), "read=1");
        assert_eq!(Knob::Reuseport.value(&t), "false");
    }

    /// The registry with one line more: a model this crate does not ship.
    macro_rules! with_trivial {
        ($($module:ident => $name:literal),* $(,)?) => {
            const EXTENDED: &[(&str, ModelInfo)] = &[$(($name, $module::MODEL)),*];
        };
    }
    crate::each_model!(with_trivial, trivial => "trivial");

    #[test]
    fn a_model_is_one_file_and_one_registry_line() {
        use std::io::{Read, Write};
        assert_eq!(EXTENDED.len(), MODELS.len() + 1);
        for ((registered, model), shipped) in EXTENDED.iter().zip(MODELS) {
            assert_eq!((*registered, model.name), (shipped.name, shipped.name));
        }
        let (registered, added) = EXTENDED.last().expect("the added line");
        assert_eq!((*registered, added.name), ("trivial", "trivial"));

        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("hello.txt"), "hello").unwrap();
        let site = pipeline::Site::dir(root.path(), false).unwrap();
        let access = pipeline::AccessLog::open(pipeline::accesslog::LogTarget::Off).unwrap();
        let errors = pipeline::ErrorLog::stderr();
        let pipeline = Pipeline::new(pipeline::Settings::default(), site, Arc::new(access), Arc::new(errors));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = Shutdown::new().unwrap();
        let env = ModelEnv {
            listener,
            pipeline: Arc::new(pipeline),
            shutdown: shutdown.clone(),
            tuning: Tuning::default(),
            admin: None,
            reload: None,
        };
        let run = added.run;
        let server = std::thread::spawn(move || run(env));

        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\r\nContent-Length: 5\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");

        shutdown.trigger();
        server.join().expect("the model's thread").expect("the model ends without an error");
    }
}

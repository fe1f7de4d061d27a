//! The runtime every model runs in: the operator's signals, the log
//! flusher, the `--admin` listener and the graceful stop, for thread and
//! process models alike.
//!
//! A process that forks must have no other thread when it does (a child
//! could inherit a lock held by a thread that does not exist in it), so a
//! process model runs in the foreground and its master's loop is its
//! runtime (`process/`): signals from a `signalfd`, the admin server in a
//! child of its own, logs flushed by each child. Every other model runs on
//! a thread of its own here, beside a signal thread, a log flusher and the
//! admin thread. Both act through the same pieces: the signals obeyed by
//! `pipeline::lifecycle` (here a `Hosted` generation fed by a signal
//! thread), `Pipeline::flush_logs`, one [`Admin`] server.

use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pipeline::lifecycle::{self, InPlace, Reload};
use pipeline::{ErrorLog, Pipeline};
use signal_hook::iterator::{Handle, Signals};
use transport::turn::Finish;
use transport::Shutdown;

use crate::{Admin, ModelEnv, ModelInfo};

/// Runs `model` in `env` until it stops, with `admin` served beside it,
/// and returns once it has stopped (gracefully on a signal, within
/// `env.tuning.shutdown_timeout`).
///
/// SIGHUP reads the configuration again (`env.reload`): a thread model's
/// new *generation* — the model run again, with the new pipeline and
/// knobs, on a copy of the listening socket — starts accepting, then the
/// old one is stopped as on SIGTERM: it accepts no more, finishes its
/// requests and returns, its log flushed last. No connection is refused
/// meanwhile (both accept from the one socket) and none is cut. A process
/// model's master does the same with its children (`process/`).
pub fn host(model: &'static ModelInfo, mut env: ModelEnv, admin: Option<Admin>) -> io::Result<()> {
    if model.caps.forks {
        let pipeline = env.pipeline.clone();
        env.admin = admin;
        let result = (model.run)(env);
        pipeline.flush_logs();
        return result;
    }
    let server_stop = env.shutdown.clone();
    let reload = env.reload.take();
    let listener = Some(env.listener.try_clone()?);
    let grace = env.tuning.shutdown_timeout;
    let mut signals = Signals::new(lifecycle::HANDLED.map(|s| s.as_raw()))?;
    let live = Live::new(env.pipeline.clone());
    {
        let (live, stop) = (live.clone(), server_stop.clone());
        thread::Builder::new().name("log-flush".into()).spawn(move || {
            // At least once a second, as the access log promises.
            while !stop.is_triggered() {
                thread::sleep(Duration::from_millis(500));
                live.flush_logs();
            }
        })?;
    }
    if let Some(Admin { listener, serve }) = admin {
        let (live, stop) = (live.clone(), server_stop.clone());
        thread::Builder::new().name("admin".into()).spawn(move || {
            serve(listener, &|| pipeline::stats::Stats::of_pipeline(&live.current()), &stop)
        })?;
    }
    let generations = Generations { model, signals: signals.handle(), current: Arc::default() };
    // The first generation stops with its own trigger, not the server's, so
    // a reload can stop it alone.
    env.shutdown = Shutdown::new()?;
    let current = generations.start(env)?;
    let mut server = Hosted { generations, current, live: live.clone(), listener, reload, server_stop };
    lifecycle::run(signals.forever(), &mut server)?;
    let Hosted { current, server_stop, .. } = server;
    // A stop asked for by a signal finishes within its grace; a generation
    // that ended by itself is waited for.
    let mut finish = Finish::default();
    finish.begin(server_stop.is_triggered().then(|| Instant::now() + grace));
    let outcome = match finish.left(Instant::now()) {
        Some(left) => current.done.recv_timeout(left).ok(),
        None => current.done.recv().ok(),
    };
    let result = match outcome {
        Some(result) => result,
        None => {
            current
                .pipeline
                .error_log
                .warn(format_args!("shutdown timeout: closing connections still in flight"));
            Ok(())
        }
    };
    live.flush_logs();
    if result.is_ok() && !server_stop.is_triggered() {
        return Err(io::Error::other(format!("the {} model stopped unexpectedly", model.name)));
    }
    result
}

/// The environment of the next generation, from the configuration read
/// again; `None` when there is nothing to read it with.
fn next_generation(
    reload: Option<&crate::Reload>,
    listener: &TcpListener,
) -> Result<Option<ModelEnv>, String> {
    let Some(reload) = reload else { return Ok(None) };
    let new = reload()?;
    Ok(Some(ModelEnv {
        listener: listener.try_clone().map_err(|e| format!("copying the listening socket: {e}"))?,
        pipeline: new.pipeline,
        shutdown: Shutdown::new().map_err(|e| e.to_string())?,
        tuning: new.tuning,
        admin: None,
        reload: None,
    }))
}

/// A thread model as the lifecycle drives it: the generation running now.
struct Hosted {
    generations: Generations,
    current: Run,
    live: Live,
    /// A copy for the generations a reload starts; dropped at the stop, so
    /// the socket closes once the running generation drops its own.
    listener: Option<TcpListener>,
    reload: Option<crate::Reload>,
    server_stop: Shutdown,
}

impl lifecycle::Generation for Hosted {
    fn error_log(&self) -> &ErrorLog {
        &self.current.pipeline.error_log
    }

    fn stop(&mut self) {
        drop(self.listener.take());
        self.server_stop.trigger();
        self.current.stop.trigger();
    }

    fn reload(&mut self) -> io::Result<Reload> {
        let listener = self.listener.as_ref().expect("held until the stop");
        let env = match next_generation(self.reload.as_ref(), listener) {
            Ok(Some(env)) => env,
            Ok(None) => return Ok(Reload::InPlace),
            Err(why) => return Ok(Reload::Refused(why)),
        };
        self.live.add(env.pipeline.clone());
        match self.generations.start(env) {
            Ok(new) => {
                std::mem::replace(&mut self.current, new).retire(&self.live);
                Ok(Reload::Started)
            }
            Err(e) => Ok(Reload::NotStarted(e.to_string())),
        }
    }

    fn hang_up_in_place(&mut self) -> InPlace {
        lifecycle::hang_up_pipeline(&self.current.pipeline)
    }

    fn reopen_logs(&mut self) {
        lifecycle::reopen_logs(&self.current.pipeline);
    }
}

/// The pipelines whose workers may still write log lines: the current one
/// and those of generations finishing their requests.
#[derive(Clone)]
struct Live(Arc<Mutex<Vec<Arc<Pipeline>>>>);

impl Live {
    fn new(first: Arc<Pipeline>) -> Live {
        Live(Arc::new(Mutex::new(vec![first])))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Pipeline>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, p: Arc<Pipeline>) {
        self.lock().push(p);
    }

    fn remove(&self, p: &Arc<Pipeline>) {
        self.lock().retain(|q| !Arc::ptr_eq(q, p));
    }

    /// The newest: what the admin pages show.
    fn current(&self) -> Arc<Pipeline> {
        self.lock().last().expect("one pipeline at least").clone()
    }

    fn flush_logs(&self) {
        let pipelines = self.lock().clone();
        for p in pipelines {
            p.flush_logs();
        }
    }
}

/// Starts generations of a thread model.
struct Generations {
    model: &'static ModelInfo,
    /// Closed when the current generation returns, which ends the signal
    /// loop (a model that stops by itself has failed).
    signals: Handle,
    current: Arc<AtomicU64>,
}

/// One run of the model.
struct Run {
    pipeline: Arc<Pipeline>,
    stop: Shutdown,
    done: mpsc::Receiver<io::Result<()>>,
}

impl Generations {
    fn start(&self, env: ModelEnv) -> io::Result<Run> {
        let id = self.current.fetch_add(1, Ordering::SeqCst) + 1;
        let (pipeline, stop) = (env.pipeline.clone(), env.shutdown.clone());
        let (done_tx, done) = mpsc::channel();
        let (run, current, signals) = (self.model.run, self.current.clone(), self.signals.clone());
        thread::Builder::new().name(format!("model-{}", self.model.name)).spawn(move || {
            let _ = done_tx.send(run(env));
            if current.load(Ordering::SeqCst) == id {
                signals.close();
            }
        })?;
        Ok(Run { pipeline, stop, done })
    }
}

impl Run {
    /// Stops it as SIGTERM would, and lets it finish in the background; its
    /// last log lines are written when it returns.
    fn retire(self, live: &Live) {
        self.stop.trigger();
        let live = live.clone();
        // Without a thread to wait for it, it still stops, and stays among
        // the live pipelines the flusher writes out.
        let _ = thread::Builder::new().name("retiring".into()).spawn(move || {
            if let Ok(Err(e)) = self.done.recv() {
                self.pipeline.error_log.error(format_args!("the workers replaced by a reload: {e}"));
            }
            self.pipeline.flush_logs();
            live.remove(&self.pipeline);
        });
    }
}

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
//! admin thread. Both act through the same pieces: `signals::obey`,
//! `Pipeline::flush_logs`, one [`Admin`] server.

use std::io;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use signal_hook::iterator::Signals;

use crate::signals::{self, Obeyed, Voice};
use crate::{Admin, ModelEnv, ModelInfo};

/// Runs `model` in `env` until it stops, with `admin` served beside it,
/// and returns once it has stopped (gracefully on a signal, within
/// `env.tuning.shutdown_timeout`).
pub fn host(model: &'static ModelInfo, mut env: ModelEnv, admin: Option<Admin>) -> io::Result<()> {
    let pipeline = env.pipeline.clone();
    if model.caps.forks {
        env.admin = admin;
        let result = (model.run)(env);
        pipeline.flush_logs();
        return result;
    }
    let shutdown = env.shutdown.clone();
    let mut signals = Signals::new(signals::HANDLED.map(|s| s.as_raw()))?;
    let signal_handle = signals.handle();
    let (flushed, flusher_stop) = (pipeline.clone(), shutdown.clone());
    thread::Builder::new().name("log-flush".into()).spawn(move || {
        // At least once a second, as the access log promises.
        while !flusher_stop.is_triggered() {
            thread::sleep(Duration::from_millis(500));
            flushed.flush_logs();
        }
    })?;
    if let Some(Admin { listener, serve }) = admin {
        let (stats_of, stop) = (pipeline.clone(), shutdown.clone());
        thread::Builder::new()
            .name("admin".into())
            .spawn(move || serve(listener, &|| pipeline::stats::Stats::of_pipeline(&stats_of), &stop))?;
    }
    let grace = env.tuning.shutdown_timeout;
    let (done_tx, done_rx) = mpsc::channel();
    let run = model.run;
    thread::Builder::new().name(format!("model-{}", model.name)).spawn(move || {
        let _ = done_tx.send(run(env));
        signal_handle.close();
    })?;
    for signal in signals.forever() {
        if signals::obey(signal, &pipeline, Voice::Server) == Obeyed::Stop {
            shutdown.trigger();
            break;
        }
    }
    let outcome =
        if shutdown.is_triggered() { done_rx.recv_timeout(grace).ok() } else { done_rx.recv().ok() };
    let result = match outcome {
        Some(result) => result,
        None => {
            pipeline.error_log.warn(format_args!("shutdown timeout: closing connections still in flight"));
            Ok(())
        }
    };
    pipeline.flush_logs();
    if result.is_ok() && !shutdown.is_triggered() {
        return Err(io::Error::other(format!("the {} model stopped unexpectedly", model.name)));
    }
    result
}

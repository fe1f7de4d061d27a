//! `per-request` — the papers' RBW (request-based worker): the accepting
//! thread starts a new thread for every connection, which runs every stage
//! and exits when the connection closes. Nothing waits in a queue; under
//! load the cost moves to thread creation and to the scheduler juggling as
//! many threads as there are clients — the latency spread of paper 000's
//! figure 7. A cap (`--max-threads`) answers 503 beyond it instead of
//! letting the process run out of memory or PIDs.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use pipeline::{refuse_overloaded, serve_blocking};

use crate::{accept, Caps, ModelEnv, ModelInfo};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "per-request",
    paper_name: "RBW",
    summary: "a new thread per connection, exiting after it (--max-threads)",
    caps: Caps { forks: false, event_driven: false, staged: false, srpt_loop: false },
    run,
};

/// As in `pool`: deep stacks are not needed, and thousands of threads with
/// the 8 MiB default would reserve tens of gigabytes of address space.
const STACK_SIZE: usize = 256 << 10;

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    let live = Arc::new(AtomicUsize::new(0));
    let result = accept::run(&listener, &shutdown, &pipeline, |stream| {
        if live.load(Ordering::Acquire) >= tuning.max_threads {
            refuse_overloaded(stream, &pipeline);
            return true;
        }
        live.fetch_add(1, Ordering::AcqRel);
        let guard = LiveThread(live.clone());
        let (shared, stop) = (pipeline.clone(), shutdown.clone());
        let spawned = thread::Builder::new().stack_size(STACK_SIZE).spawn(move || {
            let _guard = guard;
            let me = shared.stats.worker(format!("conn-{:?}", thread::current().id()));
            me.busy();
            serve_blocking(stream, &shared, &stop);
        });
        if let Err(e) = spawned {
            // The connection went down with the closure; the guard was
            // dropped with it, so the count is already right.
            pipeline.error_log.error(format_args!("per-request: cannot start a thread: {e}"));
        }
        true
    });
    drop(listener);
    // Graceful stop: in-flight connections finish on their own threads;
    // wait for the last one (the server bounds this with --shutdown-timeout).
    while live.load(Ordering::Acquire) > 0 {
        thread::sleep(std::time::Duration::from_millis(20));
    }
    result
}

/// Counts a connection thread while it lives, however it ends.
struct LiveThread(Arc<AtomicUsize>);

impl Drop for LiveThread {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

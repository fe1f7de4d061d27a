//! `per-request` — the papers' RBW (request-based worker): a new thread
//! for every request that is ready, which runs every stage and exits when
//! the client goes quiet. The accepting thread is the gate (`gate.rs`): it
//! keeps connections until a whole head has arrived and takes them back
//! between requests, so a thread is started for a request, never for a
//! client that has not finished sending one (a keep-alive client whose
//! next request follows at once stays on its thread). Nothing waits in a
//! queue; under load the cost moves to thread creation and to the
//! scheduler juggling as many threads as there are busy clients — the
//! latency spread of paper 000's figure 7. A cap (`--max-threads`) answers
//! a ready request 503 beyond it instead of letting the process run out of
//! memory or PIDs.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use std::time::Duration;

use pipeline::serve_ready;

use crate::gate::{Door, Gate};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "per-request",
    paper_name: "RBW",
    summary: "a new thread per ready request, exiting when its client goes quiet (--max-threads)",
    caps: Caps {
        forks: false,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::MaxThreads],
    run,
};

/// As in `pool`: deep stacks are not needed, and thousands of threads with
/// the 8 MiB default would reserve tens of gigabytes of address space.
const STACK_SIZE: usize = 256 << 10;

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    let mut gate = Gate::new()?;
    let returns = gate.returns();
    let live = Arc::new(AtomicUsize::new(0));
    let result = gate.run(
        &listener,
        Door::OWN,
        &shutdown,
        &pipeline,
        |mut client| {
            if live.load(Ordering::Acquire) >= tuning.max_threads {
                // At the cap: a 503, which the gate sends and closes.
                client.refuse_busy(&pipeline);
                returns.give_back(client);
                return true;
            }
            live.fetch_add(1, Ordering::AcqRel);
            let guard = LiveThread(live.clone());
            let (shared, stop, returns) = (pipeline.clone(), shutdown.clone(), returns.clone());
            let spawned = thread::Builder::new().stack_size(STACK_SIZE).spawn(move || {
                let _guard = guard;
                let me = shared.stats.worker(format!("conn-{:?}", thread::current().id()));
                me.busy();
                if let Some(client) = serve_ready(client, &shared, &stop) {
                    returns.give_back(client);
                }
            });
            if let Err(e) = spawned {
                // The connection went down with the closure; the guard was
                // dropped with it, so the count is already right.
                pipeline.error_log.error(format_args!("per-request: cannot start a thread: {e}"));
            }
            true
        },
        || true,
    );
    drop(listener);
    // Graceful stop: in-flight requests finish on their own threads; wait
    // for the last one (the server bounds this with --shutdown-timeout).
    while live.load(Ordering::Acquire) > 0 {
        thread::sleep(Duration::from_millis(20));
    }
    gate.finish(&pipeline, &shutdown);
    result
}

/// Counts a connection thread while it lives, however it ends.
struct LiveThread(Arc<AtomicUsize>);

impl Drop for LiveThread {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

//! `pool` — the papers' TPW (thread pool worker): a fixed set of threads
//! fed by one queue. The accepting thread is the gate (`gate.rs`): it
//! keeps connections in its epoll set until a whole request head has
//! arrived, then queues them for a thread, which serves requests while the
//! client keeps up and gives the connection back to the gate when it waits
//! for the client again (an idle keep-alive connection, a slow reader) —
//! Apache's worker MPM with its event add-on, rather than a thread held by
//! each connection until it closes.

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use pipeline::{serve_ready, Client};

use crate::gate::{Door, Gate};
use crate::handoff::Handoff;
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "pool",
    paper_name: "TPW",
    summary: "fixed thread pool fed whole requests by an epoll gate (--threads, --queue)",
    caps: Caps {
        forks: false,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::Threads, Knob::Queue],
    run,
};

/// Stack per worker: the request path is shallow, and hundreds of threads
/// with the 8 MiB default would reserve gigabytes of address space.
const STACK_SIZE: usize = 256 << 10;

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    let mut gate = Gate::new()?;
    // Bounded: when every thread is busy and the queue is full, the gate
    // waits, and further clients wait in the kernel's backlog.
    let queue = Arc::new(Handoff::<(Client, Instant)>::new(tuning.queue));
    let threads = tuning.threads.max(1);
    let waiting = pipeline.stats.queue("accept", threads);
    let mut workers = Vec::with_capacity(threads);
    for i in 0..threads {
        let (jobs, pipeline, shutdown) = (queue.clone(), pipeline.clone(), shutdown.clone());
        let (waiting, returns) = (waiting.clone(), gate.returns());
        let worker =
            thread::Builder::new().name(format!("pool-{i}")).stack_size(STACK_SIZE).spawn(move || {
                let me = pipeline.stats.worker(format!("pool-{i}"));
                while let Some((client, queued)) = jobs.pop() {
                    waiting.pop(queued.elapsed());
                    me.busy();
                    if let Some(client) = serve_ready(client, &pipeline, &shutdown) {
                        returns.give_back(client);
                    }
                    me.idle();
                }
            })?;
        workers.push(worker);
    }
    let result = gate.run(
        &listener,
        Door::OWN,
        &shutdown,
        &pipeline,
        |client| {
            waiting.push();
            queue.push((client, Instant::now())).is_ok()
        },
        || true,
    );
    // Refuse new connections at once; queued ones are still served.
    drop(listener);
    queue.close();
    for worker in workers {
        let _ = worker.join();
    }
    gate.finish(&pipeline, &shutdown);
    result
}

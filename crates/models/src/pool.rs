//! `pool` — the papers' TPW (thread pool worker): a fixed set of threads
//! fed by one accept queue. The acceptor never blocks on a slow client; a
//! connection waits in the queue until a thread is free and then owns that
//! thread until it closes (keep-alive included), as in Apache's worker MPM
//! without its event add-on.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use pipeline::serve_blocking_queued;

use crate::handoff::Handoff;
use crate::{accept, Caps, ModelEnv, ModelInfo};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "pool",
    paper_name: "TPW",
    summary: "fixed thread pool fed by one accept queue (--threads, --queue)",
    caps: Caps { forks: false, event_driven: false, staged: false, srpt_loop: false },
    run,
};

/// Stack per worker: the request path is shallow, and hundreds of threads
/// with the 8 MiB default would reserve gigabytes of address space.
const STACK_SIZE: usize = 256 << 10;

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, tuning, .. } = env;
    // Bounded: when every thread is busy and the queue is full, the
    // acceptor blocks and further clients wait in the kernel's backlog.
    let queue = Arc::new(Handoff::<(TcpStream, Instant)>::new(tuning.queue));
    let threads = tuning.threads.max(1);
    let waiting = pipeline.stats.queue("accept", threads);
    let mut workers = Vec::with_capacity(threads);
    for i in 0..threads {
        let (jobs, pipeline, shutdown) = (queue.clone(), pipeline.clone(), shutdown.clone());
        let waiting = waiting.clone();
        let worker =
            thread::Builder::new().name(format!("pool-{i}")).stack_size(STACK_SIZE).spawn(move || {
                let me = pipeline.stats.worker(format!("pool-{i}"));
                while let Some((stream, queued)) = jobs.pop() {
                    let waited = queued.elapsed();
                    waiting.pop(waited);
                    me.busy();
                    // The wait is the first request's `queue` phase.
                    serve_blocking_queued(stream, &pipeline, &shutdown, waited);
                    me.idle();
                }
            })?;
        workers.push(worker);
    }
    let result = accept::run(&listener, &shutdown, &pipeline, |stream| {
        waiting.push();
        queue.push((stream, Instant::now())).is_ok()
    });
    // Refuse new connections at once; queued ones are still served.
    drop(listener);
    queue.close();
    for worker in workers {
        let _ = worker.join();
    }
    result
}

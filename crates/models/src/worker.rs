//! `worker` — paper 001's DPP-STP (dynamic process pool, static thread
//! pool), Apache's worker MPM: processes come and go, each runs a fixed pool
//! of `--threads-per-child` threads fed by its own listener thread.
//!
//! **Unit: threads.** The master keeps between `--min-spare` and
//! `--max-spare` idle *threads* over all children, adding or retiring a
//! whole child (`--threads-per-child` threads) at a time, and never runs
//! more than `--max-clients` threads (`max-clients / threads-per-child`
//! children, at least one). As Apache does, the maximum is raised to at
//! least `min-spare + threads-per-child`, otherwise retiring one child would
//! fall below the minimum and the master would oscillate. A retiring child
//! stops accepting, lets its threads finish their requests (keep-alive
//! connections close at the next request boundary) and exits.
//!
//! Inside a child, one thread accepts and hands connections to the workers
//! through a bounded queue. It accepts only after reserving an idle worker
//! (Apache's `ap_queue_info_wait_for_idler`): a child whose threads are all
//! busy leaves new connections in the kernel's backlog for a child that has
//! a free thread, instead of queueing them behind a keep-alive connection.
//! That hand-off queue is measured as the queue `handoff` (length, waits)
//! and its wait is the request's `queue` phase, as for `pool`.

use std::io;
use std::net::TcpStream;
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pipeline::BLOCKING_TICK;

use crate::handoff::Handoff;
use crate::process::{self, Accepted, Child, Scaling, STACK_SIZE};
use crate::{Caps, ModelEnv, ModelInfo};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "worker",
    paper_name: "DPP-STP",
    summary: "processes vary, each a fixed pool of --threads-per-child; spare counted in threads",
    caps: Caps { forks: true, event_driven: false, staged: false, srpt_loop: false },
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    let per_child = env.tuning.threads_per_child.max(1);
    process::run(env, scaling, per_child, child)
}

fn scaling(t: &crate::Tuning) -> Scaling {
    let per_child = t.threads_per_child.max(1);
    let min_idle = t.min_spare.max(1);
    Scaling::Spare {
        unit: per_child,
        min_idle,
        max_idle: t.max_spare.max(min_idle + per_child),
        max_children: (t.max_clients / per_child).max(1),
        start: t.start_servers,
    }
}

/// One process: `threads_per_child` workers and this thread accepting.
fn child(c: &Child) {
    let per_child = c.tuning.threads_per_child.max(1);
    let idlers = Idlers::default();
    let queue = Handoff::<(TcpStream, Instant)>::new(per_child);
    let waiting = c.pipeline.stats.queue("handoff", per_child);
    thread::scope(|s| {
        for i in 0..per_child {
            let (jobs, idlers, waiting) = (&queue, &idlers, &waiting);
            let worker = thread::Builder::new().name(format!("worker-{i}")).stack_size(STACK_SIZE);
            let spawned = worker.spawn_scoped(s, move || {
                let me = c.worker(&format!("worker-{i}"));
                c.idle_workers(1);
                idlers.release();
                while let Some((stream, queued)) = jobs.pop() {
                    let waited = queued.elapsed();
                    waiting.pop(waited);
                    // The wait is the first request's `queue` phase.
                    c.serve(stream, &me, Some(waited));
                    idlers.release();
                }
                c.idle_workers(-1);
            });
            if let Err(e) = spawned {
                c.pipeline.error_log.error(format_args!("worker: cannot start a thread: {e}"));
            }
        }
        while !c.stop.is_triggered() {
            if !idlers.reserve(BLOCKING_TICK) {
                continue;
            }
            match c.accept() {
                Accepted::Conn(stream) => {
                    waiting.push();
                    if queue.push((stream, Instant::now())).is_err() {
                        waiting.unpush();
                        break;
                    }
                }
                Accepted::Idle => {
                    idlers.release();
                    if c.retire_requested() {
                        break;
                    }
                }
                Accepted::Closed => break,
            }
        }
        // Workers drain what is queued, finish, and the scope joins them.
        queue.close();
    });
}

/// Workers free to take a connection, minus those already promised one.
#[derive(Default)]
struct Idlers {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Idlers {
    /// One more worker is waiting for a connection.
    fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.freed.notify_one();
    }

    /// Promises the next connection to an idle worker, waiting up to `wait`
    /// for one; false if none became free.
    fn reserve(&self, wait: Duration) -> bool {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (mut free, _) =
            self.freed.wait_timeout_while(free, wait, |n| *n == 0).unwrap_or_else(|e| e.into_inner());
        if *free == 0 {
            return false;
        }
        *free -= 1;
        true
    }
}

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
//! Inside a child, one thread is the gate (`gate.rs`): it accepts on the
//! shared listener (`EPOLLEXCLUSIVE`: one child's gate woken per
//! connection), keeps connections in its epoll set until a whole request
//! head has arrived, and queues them for the child's workers, which give
//! them back when they wait for the client again (idle keep-alive, a slow
//! reader) — Apache's event MPM, whose children are worker's plus such a
//! listener. The queue is measured as `handoff` (length, waits) and its
//! wait is the request's `queue` phase, as for `pool`.

use std::io;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::thread;
use std::time::Instant;

use pipeline::Client;

use crate::gate::Gate;
use crate::handoff::Handoff;
use crate::process::{self, Child, Scaling, STACK_SIZE};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "worker",
    paper_name: "DPP-STP",
    summary: "processes vary, each a fixed pool of --threads-per-child; spare counted in threads",
    caps: Caps {
        forks: true,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::MaxClients, Knob::MinSpare, Knob::MaxSpare, Knob::ThreadsPerChild],
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

/// One process: `threads_per_child` workers and this thread as the gate.
fn child(c: &Child) {
    let per_child = c.tuning.threads_per_child.max(1);
    let mut gate = match Gate::new() {
        Ok(gate) => gate,
        Err(e) => return c.pipeline.error_log.error(format_args!("worker: no gate: {e}")),
    };
    let queue = Handoff::<(Client, Instant)>::new(c.tuning.queue);
    let waiting = c.pipeline.stats.queue("handoff", per_child);
    // Threads not promised a request: while there is none, the gate
    // accepts nothing, and new connections go to a child that has one
    // (Apache's `ap_queue_info_wait_for_idler`). Its own clients' next
    // requests still queue here.
    let free = AtomicIsize::new(0);
    thread::scope(|s| {
        for i in 0..per_child {
            let (jobs, waiting, returns, free) = (&queue, &waiting, gate.returns(), &free);
            let worker = thread::Builder::new().name(format!("worker-{i}")).stack_size(STACK_SIZE);
            let spawned = worker.spawn_scoped(s, move || {
                let me = c.worker(&format!("worker-{i}"));
                c.idle_workers(1);
                free.fetch_add(1, Ordering::AcqRel);
                returns.nudge();
                while let Some((client, queued)) = jobs.pop() {
                    waiting.pop(queued.elapsed());
                    if let Some(client) = c.serve_ready(client, &me) {
                        returns.give_back(client);
                    }
                    if free.fetch_add(1, Ordering::AcqRel) == 0 {
                        returns.nudge();
                    }
                }
                c.idle_workers(-1);
            });
            if let Err(e) = spawned {
                c.pipeline.error_log.error(format_args!("worker: cannot start a thread: {e}"));
            }
        }
        let room = || free.load(Ordering::Acquire) > 0;
        c.gate(&mut gate, &room, |client| {
            free.fetch_sub(1, Ordering::AcqRel);
            waiting.push();
            let queued = queue.push((client, Instant::now())).is_ok();
            if !queued {
                waiting.unpush();
            }
            queued
        });
        // Workers drain what is queued, finish, and the scope joins them.
        queue.close();
    });
    gate.finish(&c.pipeline, &c.stop);
}

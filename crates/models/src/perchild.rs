//! `perchild` — paper 001's SPP-DTP (static process pool, dynamic thread
//! pool), after Apache 2.0's perchild MPM: a fixed number of processes
//! (`--processes`), each growing and shrinking its own thread pool with load.
//!
//! **Bounds, per process.** Each child keeps between `--min-spare` and
//! `--max-spare` idle threads (at least one) and never runs more than
//! `min(--threads-per-child, --max-clients / --processes)` threads, so the
//! processes together stay within MaxClients. It starts with `min-spare`
//! threads. A thread that takes a connection starts another one first if
//! the idle count fell below `min-spare` (growth is immediate — no process
//! to fork, only a thread); a thread whose accept stayed quiet for a whole
//! tick exits if more than `max-spare` are idle.
//!
//! Each process runs a gate (`gate.rs`) on the shared socket
//! (`EPOLLEXCLUSIVE`: one process's gate woken per connection): it keeps
//! connections until a whole request head has arrived and queues them for
//! the process's threads, which give them back when they wait for the
//! client again (idle keep-alive, a slow reader). The master only replaces
//! a process that died.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, Scope};

use pipeline::{Client, BLOCKING_TICK};

use crate::gate::{Gate, Returns};
use crate::handoff::Handoff;
use crate::process::{self, Child, Scaling, STACK_SIZE};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "perchild",
    paper_name: "SPP-DTP",
    summary: "--processes fixed processes, each growing its threads between --min-spare and --max-spare idle",
    caps: Caps {
        forks: true,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::Processes, Knob::MinSpare, Knob::MaxSpare, Knob::ThreadsPerChild],
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    let t = &env.tuning;
    let max_threads = t.threads_per_child.min(t.max_clients / t.processes.max(1)).max(1);
    process::run(env, scaling, max_threads, child)
}

fn scaling(t: &crate::Tuning) -> Scaling {
    Scaling::Fixed { children: t.processes.max(1) }
}

/// One process's elastic thread pool.
struct Pool {
    /// Threads waiting for a connection.
    idle: AtomicUsize,
    /// Threads alive.
    total: AtomicUsize,
    /// Threads ever started (scoreboard names).
    started: AtomicUsize,
    max_threads: usize,
    min_idle: usize,
    max_idle: usize,
    /// Connections with a whole request head, from the gate.
    ready: Handoff<Client>,
    returns: std::sync::Arc<Returns>,
}

fn child(c: &Child) {
    let t = &c.tuning;
    let max_threads = t.threads_per_child.min(t.max_clients / t.processes.max(1)).max(1);
    let min_idle = t.min_spare.clamp(1, max_threads);
    let mut gate = match Gate::new() {
        Ok(gate) => gate,
        Err(e) => return c.pipeline.error_log.error(format_args!("perchild: no gate: {e}")),
    };
    let pool = Pool {
        idle: AtomicUsize::new(0),
        total: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        max_threads,
        min_idle,
        max_idle: t.max_spare.max(min_idle),
        ready: Handoff::new(t.queue),
        returns: gate.returns(),
    };
    thread::scope(|s| {
        for _ in 0..min_idle {
            grow(s, c, &pool);
        }
        c.gate(&mut gate, &|| true, |client| pool.ready.push(client).is_ok());
        pool.ready.close();
    });
    gate.finish(&c.pipeline, &c.stop);
}

/// Starts one more thread unless the pool is at its cap.
fn grow<'scope>(s: &'scope Scope<'scope, '_>, c: &'scope Child, pool: &'scope Pool) {
    if pool
        .total
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < pool.max_threads).then_some(n + 1))
        .is_err()
    {
        return;
    }
    pool.idle.fetch_add(1, Ordering::AcqRel);
    c.idle_workers(1);
    let spawned = thread::Builder::new().stack_size(STACK_SIZE).spawn_scoped(s, move || work(s, c, pool));
    if let Err(e) = spawned {
        pool.idle.fetch_sub(1, Ordering::AcqRel);
        pool.total.fetch_sub(1, Ordering::AcqRel);
        c.idle_workers(-1);
        c.pipeline.error_log.error(format_args!("perchild: cannot start a thread: {e}"));
    }
}

fn work<'scope>(s: &'scope Scope<'scope, '_>, c: &'scope Child, pool: &'scope Pool) {
    let me = c.worker(&format!("thread-{}", pool.started.fetch_add(1, Ordering::Relaxed)));
    loop {
        match pool.ready.pop_within(BLOCKING_TICK) {
            Ok(Some(client)) => {
                if pool.idle.fetch_sub(1, Ordering::AcqRel) - 1 < pool.min_idle {
                    grow(s, c, pool);
                }
                if let Some(client) = c.serve_ready(client, &me) {
                    pool.returns.give_back(client);
                }
                pool.idle.fetch_add(1, Ordering::AcqRel);
            }
            Err(()) => {
                // A quiet tick. Shrink: leave if more than max_idle are idle (one at a time).
                let shrink = |n: usize| (n > pool.max_idle).then(|| n - 1);
                if pool.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, shrink).is_ok() {
                    pool.total.fetch_sub(1, Ordering::AcqRel);
                    c.idle_workers(-1);
                    return;
                }
            }
            Ok(None) => break,
        }
    }
    pool.idle.fetch_sub(1, Ordering::AcqRel);
    pool.total.fetch_sub(1, Ordering::AcqRel);
    c.idle_workers(-1);
}

//! `prefork` — paper 001's DPP (dynamic process pool), Apache's prefork MPM:
//! a master process and single-threaded children, each serving one
//! connection at a time (keep-alive included) on the shared listening socket.
//!
//! The master keeps between `--min-spare` and `--max-spare` *idle
//! processes*, never more than `--max-clients` processes in all: while short
//! of idle ones it forks 1, 2, 4, … (up to 32) children per second; while
//! above the maximum it retires one idle child per second (it takes the
//! retirement only after a quiet accept, so no connection is cut). Apache
//! keeps `MaxSpareServers ≥ MinSpareServers + 1` so the two rules cannot
//! fight; so do we. A child that dies, even by SIGKILL, is reaped and, if
//! the spare rule then wants one, replaced at the next tick.
//!
//! Every child blocks in `accept()` on the shared socket; Linux wakes one
//! waiter per connection, so there is no thundering herd and no accept lock
//! (see `process/`). Connections the children cannot take yet wait in the
//! kernel's backlog — the queue of this model.

use std::io;

use crate::process::{self, Accepted, Child, Scaling};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "prefork",
    paper_name: "DPP",
    summary: "processes, one connection each; --min-spare..--max-spare idle, at most --max-clients",
    caps: Caps {
        forks: true,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: true,
    },
    knobs: &[Knob::MaxClients, Knob::MinSpare, Knob::MaxSpare],
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    process::run(env, scaling, 1, child)
}

fn scaling(t: &crate::Tuning) -> Scaling {
    let min_idle = t.min_spare.max(1);
    Scaling::Spare {
        unit: 1,
        min_idle,
        max_idle: t.max_spare.max(min_idle + 1),
        max_children: t.max_clients.max(1),
        start: t.start_servers,
    }
}

/// One process, one connection at a time, until stopped or retired.
fn child(c: &Child) {
    c.idle_workers(1);
    let me = c.worker("process");
    while !c.stop.is_triggered() {
        match c.accept() {
            Accepted::Conn(stream) => c.serve(stream, &me),
            Accepted::Idle => {
                if c.retire_requested() {
                    return;
                }
            }
            Accepted::Closed => return,
        }
    }
}

//! `amped` — the papers' AMPED (asymmetric multi-process event-driven;
//! Flash): the `event` loop, plus `--helpers` threads that run the part of
//! a request that may block on the disk, so the loop never does.
//!
//! What runs where:
//!
//! * **Loop threads** (`--workers`, the `event` loop in split mode): accept,
//!   read and parse request heads, decide keep-alive, write responses
//!   (`writev`/`sendfile`), timeouts, lingering close, the access log.
//!   When a head is parsed the connection says [`Want::Process`](pipeline::Want);
//!   the loop takes the request and sends `(token, request)` to the helpers,
//!   and leaves the socket alone until the reply is back (pipelined requests
//!   wait in the connection's buffer, in order).
//! * **Helper threads** (one pool shared by all loops): `Pipeline::handle` —
//!   path resolution, `stat`, `open`, reading small files into the cache,
//!   conditionals and ranges. They send `(token, reply)` back to the loop
//!   that asked and wake it through its eventfd [`Waker`]; the loop hands the
//!   reply to the connection and drives it again.
//! * A reply whose connection closed meanwhile (the client reset it, or it
//!   timed out) finds a token whose generation no longer matches and is
//!   dropped, closing any file it held.
//!
//! What stays in the loop: requests it can answer from memory
//! (`Pipeline::handle_in_memory`: a cache entry validated with one `stat`,
//! the embedded demo site, an error decided by the request alone). Flash
//! drew the same line with its caches and `mincore`. Everything else —
//! opening a file, reading it into the cache, a directory listing — goes to
//! a helper and costs two thread handoffs (two channel operations and
//! usually one eventfd write and wake-up).
//!
//! **CGI**: a script is started by a helper (`Pipeline::handle_request`:
//! `stat`, then `posix_spawn`, which waits for the `exec`); the reply hands
//! the running script to the connection, and the loop streams its pipes
//! exactly as `event` does (non-blocking, in the loop's epoll set).
//!
//! **Large files** (too big for the cache) go out with `sendfile` from the
//! loop, which should not wait for the disk; Flash's helpers faulted pages
//! in before the loop sent them, and so do these: the helper that answers
//! a request reads in the reply's first window (8 MiB; `FilePages::warm`:
//! a non-blocking residency probe per 128 KiB, a read of the blocks not
//! cached). Beyond it a cold page can still make the loop's `sendfile`
//! wait.
//!
//! **Warm as you send** (an experiment, `MODUS_AMPED_WARM_AHEAD=1`): the
//! connection (`Connection::set_warm_ahead`) sends no further than the
//! pages known to be in memory; at the window's edge it probes the next
//! window from the loop, and if a block is cold it stops with `Want::Warm`
//! — the loop hands those pages to a helper, leaves the socket alone as
//! for a request, and drives the connection on when the helper says they
//! are in. It was built to test whether SRPT read more from the disk than
//! FIFO in paper 004's case because 8 MiB windows, 64 connections over,
//! were evicted before being sent. That excess turned out to be the
//! measurement's (runs of a fixed length reached further into a stream
//! that is not stationary); on the same requests the schedules read alike
//! (BENCHMARKS.md, "SRPT and same-document grouping on the disk"). A hot
//! 1 MB file costs 1.19× the CPU for its probes, so it is off by default.
//! `MODUS_AMPED_READAHEAD=0` turns the kernel's own read-ahead off for the
//! files the helpers warm (`POSIX_FADV_RANDOM`; the device's
//! `read_ahead_kb` is 8 MiB on this machine's disk): 7 % fewer disk bytes
//! under FIFO, 12 % under `srpt-group` there.
//!
//! The knobs (`helpers::WarmAhead`): `MODUS_AMPED_WARM=BYTES` the window
//! (0: no warming at all), `MODUS_AMPED_WARM_AHEAD=1`,
//! `MODUS_AMPED_READAHEAD=0`. The helpers' windows after the first are the
//! `warm-ahead` queue in the statistics.

use std::io;

use crate::event;
use crate::helpers::{HelperPool, SendAway, WarmAhead};
use crate::{Caps, Knob, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "amped",
    paper_name: "AMPED",
    summary: "event loops (--workers) + helper threads (--helpers) that run the disk-bound pipeline (Flash)",
    caps: Caps {
        forks: false,
        event_driven: true,
        staged: false,
        srpt_loop: true,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[Knob::Workers, Knob::Helpers, Knob::MaxConnections],
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    let mut pool = HelperPool::start_warming(
        &env.pipeline,
        env.tuning.workers.max(1),
        env.tuning.helpers.max(1),
        "helper",
        "helpers",
        WarmAhead::from_env(),
    )?;
    let result = event::serve(env, SendAway::All, |worker| Ok(pool.take(worker)));
    pool.join();
    result
}

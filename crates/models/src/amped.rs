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
//! loop. Like Flash's helpers, which faulted pages in before the loop sent
//! them, a helper reads ahead the first `WARM_LIMIT` bytes the reply will
//! send (`Outbound::warm_file_pages`: a non-blocking residency probe per
//! 128 KiB, a read of the blocks not cached). Beyond that, a cold page can
//! still make the loop's `sendfile` wait for the disk.

use std::io;

use crate::event;
use crate::helpers::{HelperPool, SendAway, WarmAhead};
use crate::{Caps, ModelEnv, ModelInfo};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "amped",
    paper_name: "AMPED",
    summary: "event loops (--workers) + helper threads (--helpers) that run the disk-bound pipeline (Flash)",
    caps: Caps { forks: false, event_driven: true, staged: false, srpt_loop: true, sendfile: true },
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

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
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};
use pipeline::stats::QueueStat;
use pipeline::{Pipeline, Reply, Request};
use transport::poller::Waker;

use crate::event::{self, Helpers, SendAway};
use crate::{Caps, ModelEnv, ModelInfo};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "amped",
    paper_name: "AMPED",
    summary: "event loops (--workers) + helper threads (--helpers) that run the disk-bound pipeline (Flash)",
    caps: Caps { forks: false, event_driven: true, staged: false },
    run,
};

/// Helpers only resolve and open files or start scripts; a small stack
/// suffices (as in `pool`).
const STACK_SIZE: usize = 256 << 10;

/// How much of a large file a helper reads ahead before the loop sends it:
/// the first few seconds of a slow client's download, and a few socket
/// buffers' worth for a fast one.
const WARM_LIMIT: u64 = 8 << 20;

/// A request on its way to a helper, with the loop to answer.
struct Job {
    queued: Instant,
    worker: usize,
    token: u64,
    request: Request,
}

/// A helper's answer: the reply, or `None` if the pipeline panicked.
type Done = (u64, Option<Reply>);

/// Where a loop's answers go: its queue and its waker.
struct Mailbox {
    replies: Sender<Done>,
    waker: Arc<Waker>,
}

fn run(env: ModelEnv) -> io::Result<()> {
    let mut pool = HelperPool::start(
        &env.pipeline,
        env.tuning.workers.max(1),
        env.tuning.helpers.max(1),
        "helper",
        "helpers",
    )?;
    let result = event::serve(env, SendAway::All, |worker| Ok(pool.take(worker)));
    pool.join();
    result
}

/// Helper threads shared by the loops of one [`event::serve`], each loop
/// with its own mailbox. `amped` sends them every request that may block;
/// `event` uses a pool of its own to start CGI scripts.
pub(crate) struct HelperPool {
    handoffs: Vec<Option<Handoff>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl HelperPool {
    /// `threads` helpers named `{name}-{i}` for `loops` loops; their
    /// queue is `queue` in the statistics.
    pub(crate) fn start(
        pipeline: &Arc<Pipeline>,
        loops: usize,
        threads: usize,
        name: &str,
        queue: &'static str,
    ) -> io::Result<HelperPool> {
        // Unbounded, yet bounded in practice: a connection has at most one
        // request with the helpers, so the queues never hold more entries than
        // there are connections. A bounded queue could block the loop.
        let waiting = pipeline.stats.queue(queue, threads);
        let (jobs, queue) = unbounded::<Job>();
        let mut mailboxes = Vec::with_capacity(loops);
        let mut handoffs = Vec::with_capacity(loops);
        for worker in 0..loops {
            let (replies, inbox) = unbounded();
            let waker = Arc::new(Waker::new()?);
            mailboxes.push(Mailbox { replies, waker: waker.clone() });
            handoffs.push(Some(Handoff {
                worker,
                jobs: jobs.clone(),
                inbox,
                waker,
                waiting: waiting.clone(),
            }));
        }
        // From here on only the loops send jobs: when they are gone, the
        // queue disconnects and the helpers finish.
        drop(jobs);
        let mailboxes = Arc::new(mailboxes);
        let mut pool = HelperPool { handoffs, threads: Vec::with_capacity(threads) };
        for i in 0..threads {
            let (queue, mailboxes, pipeline) = (queue.clone(), mailboxes.clone(), pipeline.clone());
            let waiting = waiting.clone();
            let thread_name = format!("{name}-{i}");
            let spawned =
                thread::Builder::new().name(thread_name.clone()).stack_size(STACK_SIZE).spawn(move || {
                    let me = pipeline.stats.worker(thread_name);
                    for Job { queued, worker, token, request } in queue.iter() {
                        waiting.pop(queued.elapsed());
                        me.busy();
                        // The loop cannot answer a request whose helper died, so
                        // a panic (a bug) costs that connection only.
                        let reply = catch_unwind(AssertUnwindSafe(|| pipeline.handle_request(&request)));
                        match &reply {
                            // The loop will `sendfile` these pages: read them here so it does not wait on the disk.
                            Ok(reply) => {
                                if let Err(e) = reply.out.warm_file_pages(WARM_LIMIT) {
                                    pipeline.error_log.warn(format_args!("helper: reading ahead: {e}"));
                                }
                            }
                            Err(_) => pipeline.error_log.error(format_args!("helper: the pipeline panicked")),
                        }
                        let mailbox = &mailboxes[worker];
                        // A send fails only when that loop has exited (after an error).
                        if mailbox.replies.send((token, reply.ok())).is_ok() {
                            mailbox.waker.wake();
                        }
                        me.idle();
                    }
                });
            match spawned {
                Ok(thread) => pool.threads.push(thread),
                Err(e) => {
                    // The helpers already running finish once the handoffs are gone.
                    pool.join();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// Loop `worker`'s end of the queues (once).
    pub(crate) fn take(&mut self, worker: usize) -> Option<Box<dyn Helpers>> {
        let handoff = self.handoffs.get_mut(worker).and_then(Option::take);
        handoff.map(|h| Box::new(h) as Box<dyn Helpers>)
    }

    /// Waits for the helpers, once the loops (which hold the job senders) are gone.
    pub(crate) fn join(&mut self) {
        // Handoffs not taken (a loop failed to start) hold job senders too.
        self.handoffs.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A loop's end of the helper queues.
struct Handoff {
    worker: usize,
    jobs: Sender<Job>,
    inbox: Receiver<Done>,
    waker: Arc<Waker>,
    waiting: Arc<QueueStat>,
}

impl Helpers for Handoff {
    fn waker(&self) -> &Waker {
        &self.waker
    }

    fn submit(&mut self, token: u64, request: Request) -> bool {
        self.waiting.push();
        let sent =
            self.jobs.send(Job { queued: Instant::now(), worker: self.worker, token, request }).is_ok();
        if !sent {
            self.waiting.unpush();
        }
        sent
    }

    fn finished(&mut self) -> Option<Done> {
        self.inbox.try_recv().ok()
    }
}

//! Helper threads for the event loops: the queue a loop sends work down and
//! the mailbox (a channel and an eventfd waker) its answers come back to.
//! `amped` sends them every request that may block on the disk; `event`
//! uses a pool of its own to start CGI scripts (`posix_spawn` waits for the
//! `exec`). The loop side sees only the [`Helpers`] trait.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crossbeam_channel::{unbounded, Receiver, Sender};
use pipeline::stats::QueueStat;
use pipeline::{Pipeline, Reply, Request};
use transport::poller::Waker;

/// Which requests a loop with [`Helpers`] sends to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendAway {
    /// CGI requests only: starting a script may block (`event`).
    Cgi,
    /// Every request that cannot be answered from memory (`amped`).
    All,
}

/// Where a loop in split mode (`amped`) sends parsed requests.
pub(crate) trait Helpers: Send {
    /// Signalled when replies are waiting; the loop registers it.
    fn waker(&self) -> &Waker;
    /// Hands a request over; `false` if nobody is left to take it.
    fn submit(&mut self, token: u64, request: Request) -> bool;
    /// A finished request — `None` for the reply if the pipeline failed —
    /// or `None` when no more are waiting.
    fn finished(&mut self) -> Option<(u64, Option<Reply>)>;
}

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

/// Helper threads shared by the loops of one `event::serve`, each loop
/// with its own mailbox. `amped` sends them every request that may block;
/// `event` uses a pool of its own to start CGI scripts.
pub(crate) struct HelperPool {
    ends: Vec<Option<LoopEnd>>,
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
        let mut ends = Vec::with_capacity(loops);
        for worker in 0..loops {
            let (replies, inbox) = unbounded();
            let waker = Arc::new(Waker::new()?);
            mailboxes.push(Mailbox { replies, waker: waker.clone() });
            ends.push(Some(LoopEnd { worker, jobs: jobs.clone(), inbox, waker, waiting: waiting.clone() }));
        }
        // From here on only the loops send jobs: when they are gone, the
        // queue disconnects and the helpers finish.
        drop(jobs);
        let mailboxes = Arc::new(mailboxes);
        let mut pool = HelperPool { ends, threads: Vec::with_capacity(threads) };
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
                            Ok(Reply::Response(response)) => {
                                if let Err(e) = response.out.warm_file_pages(WARM_LIMIT) {
                                    pipeline.error_log.warn(format_args!("helper: reading ahead: {e}"));
                                }
                            }
                            Ok(_) => {}
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
                    // The helpers already running finish once the loop ends are gone.
                    pool.join();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// Loop `worker`'s end of the queues (once).
    pub(crate) fn take(&mut self, worker: usize) -> Option<Box<dyn Helpers>> {
        let end = self.ends.get_mut(worker).and_then(Option::take);
        end.map(|end| Box::new(end) as Box<dyn Helpers>)
    }

    /// Waits for the helpers, once the loops (which hold the job senders) are gone.
    pub(crate) fn join(&mut self) {
        // Ends not taken (a loop failed to start) hold job senders too.
        self.ends.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A loop's end of the helper queues.
struct LoopEnd {
    worker: usize,
    jobs: Sender<Job>,
    inbox: Receiver<Done>,
    waker: Arc<Waker>,
    waiting: Arc<QueueStat>,
}

impl Helpers for LoopEnd {
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

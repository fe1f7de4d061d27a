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
use transport::FilePages;

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
    /// The warm-ahead window the loop's connections send large files in
    /// (`Connection::set_warm_ahead`); 0: none.
    fn warm_window(&self) -> u64;
    /// Hands over pages of a response to read into memory
    /// (`Want::Warm`); `false` if nobody is left to take them.
    fn warm(&mut self, token: u64, pages: FilePages) -> bool;
    /// A connection whose pages were warmed, or `None` when no more are waiting.
    fn warmed(&mut self) -> Option<u64>;
}

/// How `amped`'s helpers read ahead of the loop's `sendfile`s, from the
/// environment (an experiment's knobs, as `uring`'s are):
///
/// * `MODUS_AMPED_WARM` (bytes, default [`WARM_WINDOW`]): the window — how
///   much of a large file a helper reads in before the loop sends it, and
///   the step by which the loop's connection asks for more;
/// * `MODUS_AMPED_WARM_AHEAD=1`: every window is warmed as the reply is
///   sent ("warm as you send"); by default only the first window of a
///   reply is, and the rest is `sendfile`d as it is (a cold page stalls
///   the loop). Off by default: on paper 004's disk case it read no less
///   from the disk, and a hot 1 MB file costs 1.19× the
///   CPU for its probes (BENCHMARKS.md, "SRPT and same-document grouping
///   on the disk");
/// * `MODUS_AMPED_READAHEAD=0`: the kernel's own read-ahead is off for the
///   files the helpers warm (`FilePages::without_readahead`), so the
///   windows are all that is read ahead. With it on (the default) a
///   sequential read or `sendfile` may read up to the device's
///   `read_ahead_kb` (8 MiB on some virtual disks) past it, per file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WarmAhead {
    /// Bytes warmed per window; 0: none.
    pub(crate) window: u64,
    /// The loop asks for every window, not only the first.
    pub(crate) as_sent: bool,
    /// The kernel reads ahead too.
    pub(crate) readahead: bool,
}

impl WarmAhead {
    /// No warming (the spawners of scripts, whose replies send no files).
    pub(crate) const OFF: WarmAhead = WarmAhead { window: 0, as_sent: false, readahead: true };

    pub(crate) fn from_env() -> WarmAhead {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
        WarmAhead {
            window: var("MODUS_AMPED_WARM").unwrap_or(WARM_WINDOW),
            as_sent: var("MODUS_AMPED_WARM_AHEAD") == Some(1),
            readahead: var("MODUS_AMPED_READAHEAD") != Some(0),
        }
    }
}

/// Helpers only resolve and open files or start scripts; a small stack
/// suffices (as in `pool`).
const STACK_SIZE: usize = 256 << 10;

/// How much of a large file a helper reads in before the loop sends it, by
/// default: the first few seconds of a slow client's download, and a few
/// socket buffers' worth for a fast one. A smaller window (256 KiB, with
/// warm-ahead on) did not change what SRPT read from the disk in paper
/// 004's case (issue 15), so the window was not why it read more.
const WARM_WINDOW: u64 = 8 << 20;

/// Work on its way to a helper, with the loop to answer.
struct Job {
    queued: Instant,
    worker: usize,
    token: u64,
    work: Work,
}

// Unboxed: a request (the common job) would cost an allocation per
// hand-off boxed, and a warm job's wasted bytes only sit in the channel.
#[allow(clippy::large_enum_variant)]
enum Work {
    /// Run the pipeline (and warm the reply's first window).
    Request(Request),
    /// Read these pages of a response being sent into memory.
    Warm(FilePages),
}

/// A helper's answer: the reply, or `None` if the pipeline panicked.
type Done = (u64, Option<Reply>);

/// Where a loop's answers go: its queues and its waker.
struct Mailbox {
    replies: Sender<Done>,
    warmed: Sender<u64>,
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
        HelperPool::start_warming(pipeline, loops, threads, name, queue, WarmAhead::OFF)
    }

    /// [`start`](Self::start), the helpers warming the pages of large
    /// files as `warm` says; the windows read after the first are counted
    /// as the queue `warm-ahead` in the statistics.
    pub(crate) fn start_warming(
        pipeline: &Arc<Pipeline>,
        loops: usize,
        threads: usize,
        name: &str,
        queue: &'static str,
        warm: WarmAhead,
    ) -> io::Result<HelperPool> {
        // Unbounded, yet bounded in practice: a connection has at most one
        // request with the helpers, so the queues never hold more entries than
        // there are connections. A bounded queue could block the loop.
        let waiting = pipeline.stats.queue(queue, threads);
        let warming = warm.as_sent.then(|| pipeline.stats.queue("warm-ahead", threads));
        let (jobs, queue) = unbounded::<Job>();
        let mut mailboxes = Vec::with_capacity(loops);
        let mut ends = Vec::with_capacity(loops);
        for worker in 0..loops {
            let (replies, inbox) = unbounded();
            let (warmed, warmed_inbox) = unbounded();
            let waker = Arc::new(Waker::new()?);
            mailboxes.push(Mailbox { replies, warmed, waker: waker.clone() });
            ends.push(Some(LoopEnd {
                worker,
                jobs: jobs.clone(),
                inbox,
                warmed: warmed_inbox,
                waker,
                waiting: waiting.clone(),
                warming: warming.clone(),
                window: if warm.as_sent { warm.window } else { 0 },
            }));
        }
        // From here on only the loops send jobs: when they are gone, the
        // queue disconnects and the helpers finish.
        drop(jobs);
        let mailboxes = Arc::new(mailboxes);
        let mut pool = HelperPool { ends, threads: Vec::with_capacity(threads) };
        for i in 0..threads {
            let (queue, mailboxes, pipeline) = (queue.clone(), mailboxes.clone(), pipeline.clone());
            let (waiting, warming) = (waiting.clone(), warming.clone());
            let thread_name = format!("{name}-{i}");
            let spawned =
                thread::Builder::new().name(thread_name.clone()).stack_size(STACK_SIZE).spawn(move || {
                    let me = pipeline.stats.worker(thread_name);
                    for Job { queued, worker, token, work } in queue.iter() {
                        let mailbox = &mailboxes[worker];
                        match work {
                            Work::Request(request) => {
                                waiting.pop(queued.elapsed());
                                me.busy();
                                let reply = run(&pipeline, &request, warm);
                                // A send fails only when that loop has exited (after an error).
                                if mailbox.replies.send((token, reply)).is_ok() {
                                    mailbox.waker.wake();
                                }
                            }
                            Work::Warm(pages) => {
                                if let Some(warming) = &warming {
                                    warming.pop(queued.elapsed());
                                }
                                me.busy();
                                if let Err(e) = pages.warm() {
                                    pipeline.error_log.warn(format_args!("helper: reading ahead: {e}"));
                                }
                                if mailbox.warmed.send(token).is_ok() {
                                    mailbox.waker.wake();
                                }
                            }
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

/// Runs the pipeline for `request` and reads in the first window of the
/// reply's file pages, which the loop will `sendfile`, so that it does not
/// wait for the disk; `None` if the pipeline panicked.
fn run(pipeline: &Pipeline, request: &Request, warm: WarmAhead) -> Option<Reply> {
    // The loop cannot answer a request whose helper died, so a panic (a
    // bug) costs that connection only.
    let reply = catch_unwind(AssertUnwindSafe(|| pipeline.handle_request(request)));
    match &reply {
        Ok(Reply::Response(response)) if warm.window > 0 => {
            let pages = response.out.file_pages(warm.window);
            if !warm.readahead {
                pages.without_readahead();
            }
            if let Err(e) = pages.warm() {
                pipeline.error_log.warn(format_args!("helper: reading ahead: {e}"));
            }
        }
        Ok(_) => {}
        Err(_) => pipeline.error_log.error(format_args!("helper: the pipeline panicked")),
    }
    reply.ok()
}

/// A loop's end of the helper queues.
struct LoopEnd {
    worker: usize,
    jobs: Sender<Job>,
    inbox: Receiver<Done>,
    warmed: Receiver<u64>,
    waker: Arc<Waker>,
    waiting: Arc<QueueStat>,
    /// The `warm-ahead` queue's statistics, if the loop warms ahead.
    warming: Option<Arc<QueueStat>>,
    window: u64,
}

impl Helpers for LoopEnd {
    fn waker(&self) -> &Waker {
        &self.waker
    }

    fn submit(&mut self, token: u64, request: Request) -> bool {
        self.waiting.push();
        let work = Work::Request(request);
        let sent = self.jobs.send(Job { queued: Instant::now(), worker: self.worker, token, work }).is_ok();
        if !sent {
            self.waiting.unpush();
        }
        sent
    }

    fn finished(&mut self) -> Option<Done> {
        self.inbox.try_recv().ok()
    }

    fn warm_window(&self) -> u64 {
        self.window
    }

    fn warm(&mut self, token: u64, pages: FilePages) -> bool {
        let Some(warming) = &self.warming else { return false };
        warming.push();
        let work = Work::Warm(pages);
        let sent = self.jobs.send(Job { queued: Instant::now(), worker: self.worker, token, work }).is_ok();
        if !sent {
            warming.unpush();
        }
        sent
    }

    fn warmed(&mut self) -> Option<u64> {
        self.warmed.try_recv().ok()
    }
}

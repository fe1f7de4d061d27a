//! A thin, safe wrapper over Linux `epoll`, for the event-driven models.
//!
//! Registration takes a `u64` token (echoed back with every event), an
//! [`Interest`] (readable, writable) and a [`Trigger`]; the trigger mode is a
//! parameter rather than a policy, because which one is best is part of what
//! the models measure (mio, by contrast, is always edge-triggered).
//!
//! [`Waker`] (an `eventfd`) lets other threads interrupt a loop's
//! [`Poller::wait`], e.g. helper threads returning finished work.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Duration;

use rustix::buffer::spare_capacity;
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};
use rustix::io::Errno;

/// The readiness a registration asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest {
    readable: bool,
    writable: bool,
}

impl Interest {
    /// Input (or end of input) is available.
    pub const READABLE: Interest = Interest { readable: true, writable: false };
    /// Output space is available.
    pub const WRITABLE: Interest = Interest { readable: false, writable: true };
    /// Both, e.g. one edge-triggered registration for a connection's whole life.
    pub const BOTH: Interest = Interest { readable: true, writable: true };

    /// Whether input readiness is asked for.
    pub fn is_readable(self) -> bool {
        self.readable
    }

    /// Whether output readiness is asked for.
    pub fn is_writable(self) -> bool {
        self.writable
    }

    fn flags(self) -> EventFlags {
        let mut flags = EventFlags::empty();
        if self.readable {
            // RDHUP: the peer's half-close is reported even if no data follows.
            flags |= EventFlags::IN | EventFlags::RDHUP;
        }
        if self.writable {
            flags |= EventFlags::OUT;
        }
        flags
    }
}

/// When `epoll` reports a registered descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Whenever it is ready (`poll`/`select` semantics): simple, but a ready
    /// descriptor nobody drains is reported on every wait.
    Level,
    /// When its readiness changes (`EPOLLET`): register once with
    /// [`Interest::BOTH`] and drain until `EAGAIN` (nginx's way; no
    /// `epoll_ctl` per request).
    Edge,
    /// Once, then disabled until [`Poller::modify`] re-arms it
    /// (`EPOLLONESHOT`): for descriptors handed between threads.
    Oneshot,
    /// Level-triggered, but when several pollers watch the same descriptor
    /// only one of them is woken (`EPOLLEXCLUSIVE`, Linux 4.5). This is how
    /// loops sharing one listener avoid the thundering herd: a new connection
    /// wakes one loop, not all of them. Only valid with [`Poller::add`];
    /// such a registration cannot be modified, only deleted and added again.
    Exclusive,
}

impl Trigger {
    fn flags(self) -> EventFlags {
        match self {
            Trigger::Level => EventFlags::empty(),
            Trigger::Edge => EventFlags::ET,
            Trigger::Oneshot => EventFlags::ONESHOT,
            Trigger::Exclusive => EventFlags::EXCLUSIVE,
        }
    }
}

/// The longest single wait: `epoll_pwait` takes milliseconds in a C `int`
/// (rustix would switch to `epoll_pwait2` beyond that, which some seccomp
/// filters reject). Callers loop anyway, so a day is as good as forever.
const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// An `epoll` instance.
#[derive(Debug)]
pub struct Poller {
    epoll: OwnedFd,
}

impl Poller {
    /// A new, empty poller (close-on-exec).
    pub fn new() -> io::Result<Poller> {
        Ok(Poller { epoll: epoll::create(CreateFlags::CLOEXEC)? })
    }

    /// Starts watching `fd`; its events carry `token`.
    ///
    /// Closing `fd` removes it (unless the descriptor was duplicated), so a
    /// connection needs no [`delete`](Self::delete) before it is dropped.
    pub fn add(&self, fd: impl AsFd, token: u64, interest: Interest, trigger: Trigger) -> io::Result<()> {
        let mut flags = interest.flags() | trigger.flags();
        if trigger == Trigger::Exclusive {
            // The kernel refuses EPOLLRDHUP next to EPOLLEXCLUSIVE (EINVAL);
            // a listener has no half-close to report anyway.
            flags.remove(EventFlags::RDHUP);
        }
        Ok(epoll::add(&self.epoll, fd, EventData::new_u64(token), flags)?)
    }

    /// Changes what `fd` is watched for (and re-arms a [`Trigger::Oneshot`]).
    /// [`Trigger::Exclusive`] is refused, as the kernel does.
    pub fn modify(&self, fd: impl AsFd, token: u64, interest: Interest, trigger: Trigger) -> io::Result<()> {
        if trigger == Trigger::Exclusive {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "EPOLLEXCLUSIVE cannot be modified"));
        }
        let flags = interest.flags() | trigger.flags();
        Ok(epoll::modify(&self.epoll, fd, EventData::new_u64(token), flags)?)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: impl AsFd) -> io::Result<()> {
        Ok(epoll::delete(&self.epoll, fd)?)
    }

    /// Waits until at least one watched descriptor is ready or `timeout`
    /// passes (`None`: no timeout), filling `events` (up to its capacity).
    /// Returns the number of events; 0 on timeout or when a signal
    /// interrupted the wait (the caller's loop simply waits again).
    pub fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        events.list.clear();
        // Rounded up to whole milliseconds by rustix, so a loop waiting for
        // a deadline 0.3 ms away sleeps, rather than spinning with timeout 0.
        let timeout = timeout.map(|d| {
            let d = d.min(MAX_WAIT);
            Timespec { tv_sec: d.as_secs() as i64, tv_nsec: d.subsec_nanos().into() }
        });
        match epoll::wait(&self.epoll, spare_capacity(&mut events.list), timeout.as_ref()) {
            Ok(n) => Ok(n),
            Err(Errno::INTR) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

/// A buffer for the events of one [`Poller::wait`].
pub struct Events {
    list: Vec<epoll::Event>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Events {
    /// Room for up to `capacity` events per wait (at least 1).
    pub fn with_capacity(capacity: usize) -> Events {
        Events { list: Vec::with_capacity(capacity.max(1)) }
    }

    /// The events of the last wait.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        // Copies: the kernel's struct is packed, so no references into it.
        self.list.iter().map(|e| {
            let (flags, data) = (e.flags, e.data);
            Event { token: data.u64(), flags }
        })
    }

    /// How many events the last wait returned.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True if the last wait returned none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// One readiness report.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    token: u64,
    flags: EventFlags,
}

impl Event {
    /// The token the descriptor was registered with.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// A read will not block: data, end of input, or an error to collect.
    pub fn is_readable(&self) -> bool {
        self.flags.intersects(EventFlags::IN | EventFlags::RDHUP | EventFlags::HUP | EventFlags::ERR)
    }

    /// A write will not block: space, or an error to collect.
    pub fn is_writable(&self) -> bool {
        self.flags.intersects(EventFlags::OUT | EventFlags::HUP | EventFlags::ERR)
    }

    /// The peer will send nothing more (half-close, hang-up or error): its
    /// end of stream is readable now, behind any bytes still queued.
    pub fn is_read_closed(&self) -> bool {
        self.flags.intersects(EventFlags::RDHUP | EventFlags::HUP | EventFlags::ERR)
    }

    /// The connection is gone in both directions (or reset), or failed: no
    /// reply can reach the peer. A mere half-close (`RDHUP`) is not this.
    pub fn is_gone(&self) -> bool {
        self.flags.intersects(EventFlags::HUP | EventFlags::ERR)
    }
}

/// Wakes a thread blocked in [`Poller::wait`] from any other thread.
///
/// Register it (level-triggered, readable) with the loop's poller; other
/// threads call [`wake`](Self::wake), the loop calls [`reset`](Self::reset)
/// when it sees the event and *then* looks for the work it was woken for.
/// Wake-ups coalesce: while one is pending, further ones cost no system call.
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
    /// A wake-up was signalled and the loop has not reset it yet.
    pending: AtomicBool,
}

impl Waker {
    /// A new waker (a non-blocking, close-on-exec `eventfd`).
    pub fn new() -> io::Result<Waker> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Waker { fd, pending: AtomicBool::new(false) })
    }

    /// Makes the waker readable. Call it after publishing the work (e.g.
    /// sending on a channel), never before.
    pub fn wake(&self) {
        // Pairs with the fence in `reset` (a Dekker-style handshake): either
        // the loop's look for work after its reset sees what we published,
        // or we see `pending == false` here and write — never neither.
        fence(Ordering::SeqCst);
        if !self.pending.swap(true, Ordering::Relaxed) {
            // Cannot fail in practice: the counter would have to reach 2^64 - 1.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// Clears a wake-up; the caller must look for work afterwards.
    pub fn reset(&self) {
        let mut buf = [0u8; 8];
        // EAGAIN (already clear) is fine.
        let _ = rustix::io::read(&self.fd, &mut buf);
        self.pending.store(false, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::Instant;

    const SHORT: Option<Duration> = Some(Duration::from_millis(20));

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn tokens(p: &Poller, events: &mut Events) -> Vec<(u64, bool, bool)> {
        p.wait(events, SHORT).unwrap();
        events.iter().map(|e| (e.token(), e.is_readable(), e.is_writable())).collect()
    }

    #[test]
    fn level_reports_until_drained_edge_reports_once() {
        let (mut a, b) = pair();
        let (mut c, d) = pair();
        let p = Poller::new().unwrap();
        let mut events = Events::with_capacity(8);
        p.add(&b, 1, Interest::READABLE, Trigger::Level).unwrap();
        p.add(&d, 2, Interest::READABLE, Trigger::Edge).unwrap();
        assert!(tokens(&p, &mut events).is_empty(), "nothing is ready yet");
        a.write_all(b"x").unwrap();
        c.write_all(b"y").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut first = tokens(&p, &mut events);
        first.sort();
        assert_eq!(first, [(1, true, false), (2, true, false)]);
        // Nobody read: level-triggered reports again, edge-triggered does not.
        assert_eq!(tokens(&p, &mut events), [(1, true, false)]);
        // New data is a new edge.
        c.write_all(b"z").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut again = tokens(&p, &mut events);
        again.sort();
        assert_eq!(again, [(1, true, false), (2, true, false)]);
    }

    #[test]
    fn both_interests_and_hangup() {
        let (a, b) = pair();
        let p = Poller::new().unwrap();
        let mut events = Events::with_capacity(8);
        p.add(&b, 7, Interest::BOTH, Trigger::Edge).unwrap();
        // A fresh socket has send space.
        assert_eq!(tokens(&p, &mut events), [(7, false, true)]);
        drop(a);
        std::thread::sleep(Duration::from_millis(20));
        p.wait(&mut events, SHORT).unwrap();
        let e = events.iter().next().expect("the close is reported");
        assert!(e.is_readable(), "end of input reads as readable");
    }

    #[test]
    fn oneshot_needs_rearming_and_delete_stops_reports() {
        let (mut a, b) = pair();
        let p = Poller::new().unwrap();
        let mut events = Events::with_capacity(8);
        p.add(&b, 3, Interest::READABLE, Trigger::Oneshot).unwrap();
        a.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(tokens(&p, &mut events), [(3, true, false)]);
        assert!(tokens(&p, &mut events).is_empty(), "disarmed after one report");
        p.modify(&b, 4, Interest::READABLE, Trigger::Oneshot).unwrap();
        assert_eq!(tokens(&p, &mut events), [(4, true, false)], "re-armed, with the new token");
        p.modify(&b, 4, Interest::READABLE, Trigger::Level).unwrap();
        p.delete(&b).unwrap();
        assert!(tokens(&p, &mut events).is_empty());
    }

    #[test]
    fn exclusive_listener_wakes_and_cannot_be_modified() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (p1, p2) = (Poller::new().unwrap(), Poller::new().unwrap());
        p1.add(&l, 9, Interest::READABLE, Trigger::Exclusive).unwrap();
        p2.add(&l, 9, Interest::READABLE, Trigger::Exclusive).unwrap();
        let _client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut events = Events::with_capacity(8);
        // Nobody is blocked in epoll_wait, so both may see it; what matters
        // is that exclusive registrations report at all.
        assert_eq!(tokens(&p1, &mut events), [(9, true, false)]);
        assert!(p1.modify(&l, 9, Interest::READABLE, Trigger::Exclusive).is_err());
    }

    #[test]
    fn timeouts_short_and_huge() {
        let p = Poller::new().unwrap();
        let mut events = Events::with_capacity(0);
        let start = Instant::now();
        assert_eq!(p.wait(&mut events, Some(Duration::from_millis(30))).unwrap(), 0);
        assert!(start.elapsed() >= Duration::from_millis(30));
        // A timeout beyond what epoll_pwait takes is clamped, not an error.
        let waker = Waker::new().unwrap();
        p.add(&waker, 1, Interest::READABLE, Trigger::Level).unwrap();
        waker.wake();
        assert_eq!(p.wait(&mut events, Some(Duration::MAX)).unwrap(), 1);
    }

    #[test]
    fn waker_wakes_another_thread_and_coalesces() {
        let p = Poller::new().unwrap();
        let waker = Arc::new(Waker::new().unwrap());
        p.add(&*waker, 5, Interest::READABLE, Trigger::Level).unwrap();
        let mut events = Events::with_capacity(8);
        let w = waker.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w.wake();
            w.wake();
        });
        p.wait(&mut events, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(events.iter().map(|e| e.token()).collect::<Vec<_>>(), [5]);
        t.join().unwrap();
        waker.reset();
        assert!(tokens(&p, &mut events).is_empty(), "reset clears both wake-ups");
        waker.wake();
        assert_eq!(tokens(&p, &mut events), [(5, true, false)], "wakes again after a reset");
    }
}

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::pipe::{pipe_with, PipeFlags};

/// A stop request shared by every thread of a server.
///
/// Threads that wait for a listener to become readable must also wake when
/// the server stops; a flag alone cannot do that. The flag is paired with a
/// pipe that becomes readable once [`Shutdown::trigger`] runs and stays
/// readable, so any number of pollers see it.
#[derive(Clone, Debug)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    requested: AtomicBool,
    wake_read: OwnedFd,
    wake_write: OwnedFd,
}

/// Why [`Shutdown::wait_readable`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// The watched descriptor is readable.
    Ready,
    /// A stop was requested.
    Stop,
    /// The timeout passed.
    Timeout,
}

impl Shutdown {
    /// A new, untriggered stop request.
    pub fn new() -> io::Result<Shutdown> {
        let (wake_read, wake_write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Shutdown { inner: Arc::new(Inner { requested: AtomicBool::new(false), wake_read, wake_write }) })
    }

    /// Requests the stop and wakes every waiter. Idempotent.
    pub fn trigger(&self) {
        if !self.inner.requested.swap(true, Ordering::SeqCst) {
            // The pipe is never drained, so one byte keeps it readable for all.
            let _ = rustix::io::write(&self.inner.wake_write, b"x");
        }
    }

    /// True once a stop was requested.
    pub fn is_triggered(&self) -> bool {
        self.inner.requested.load(Ordering::Relaxed)
    }

    /// The read end of the stop pipe, for event loops that watch it with
    /// their own poller: it becomes readable when the stop is requested and
    /// stays readable (never drained), so a level-triggered registration
    /// must be deleted once seen.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.inner.wake_read.as_fd()
    }

    /// Waits until `fd` is readable, a stop is requested, or `timeout` passes.
    pub fn wait_readable(&self, fd: impl AsFd, timeout: Option<Duration>) -> io::Result<Wake> {
        if self.is_triggered() {
            return Ok(Wake::Stop);
        }
        let mut fds = [PollFd::new(&fd, PollFlags::IN), PollFd::new(&self.inner.wake_read, PollFlags::IN)];
        let timeout =
            timeout.map(|d| Timespec::try_from(d).unwrap_or(Timespec { tv_sec: i64::MAX, tv_nsec: 0 }));
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(Wake::Timeout),
            Err(e) => return Err(e.into()),
        }
        if self.is_triggered() || !fds[1].revents().is_empty() {
            Ok(Wake::Stop)
        } else if fds[0].revents().is_empty() {
            Ok(Wake::Timeout)
        } else {
            Ok(Wake::Ready)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_wakes_a_waiter_and_stays_set() {
        let stop = Shutdown::new().unwrap();
        let (r, _w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        assert_eq!(stop.wait_readable(&r, Some(Duration::from_millis(10))).unwrap(), Wake::Timeout);
        let s2 = stop.clone();
        let t = std::thread::spawn(move || s2.wait_readable(&r, None).unwrap());
        stop.trigger();
        assert_eq!(t.join().unwrap(), Wake::Stop);
        assert!(stop.is_triggered());
    }
}

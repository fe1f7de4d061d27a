//! The accept loop shared by the thread-based models.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use pipeline::Pipeline;
use transport::{Shutdown, Wake};

/// Accepts until `stop` fires, handing each connection to `dispatch`.
/// Returns when stopped or when `dispatch` returns `false` (no one is left
/// to take connections).
///
/// The listener is non-blocking and watched together with the stop pipe,
/// so a stop is noticed at once rather than at the next connection.
/// Accepted sockets come with the [`pipeline::BLOCKING_TICK`] timeouts
/// `serve_blocking` needs: the server sets them on the listener
/// (`transport::listener::set_accepted_defaults`) before it announces it.
pub fn run(
    listener: &TcpListener,
    stop: &Shutdown,
    pipeline: &Pipeline,
    mut dispatch: impl FnMut(TcpStream) -> bool,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    loop {
        match stop.wait_readable(listener, None)? {
            Wake::Stop => return Ok(()),
            Wake::Timeout => continue,
            Wake::Ready => {}
        }
        // Take everything queued before waiting again: one wake-up, many connections.
        loop {
            match listener.accept() {
                // Linux does not pass O_NONBLOCK on to accepted sockets:
                // they are blocking, as the thread models want.
                Ok((stream, _)) => {
                    if !dispatch(stream) {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_transient(&e) => {
                    // Out of descriptors or memory: back off instead of
                    // spinning on a listener that stays readable.
                    pipeline
                        .error_log
                        .error_once("accept", format_args!("accept: {e}: {}", crate::ACCEPT_HINT));
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
                // The peer gave up between SYN and accept: not our problem.
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

pub(crate) fn is_transient(e: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(Errno::from_io_error(e), Some(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM))
}

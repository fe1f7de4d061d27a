//! The accept loop shared by the thread-based models.

use std::io;
use std::net::{TcpListener, TcpStream};

use pipeline::Pipeline;
use transport::accept::{self, Failed};
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
            match accept::accept(listener, accept::Mode::Blocking) {
                Ok((stream, _)) => {
                    if !dispatch(stream) {
                        return Ok(());
                    }
                }
                Err((Failed::Retry, _)) => {}
                Err((Failed::Empty, _)) => break,
                Err((Failed::Pause, e)) => {
                    // Out of descriptors or memory: back off instead of
                    // spinning on a listener that stays readable.
                    pipeline.error_log.accept_paused(&e);
                    std::thread::sleep(accept::PAUSE);
                    break;
                }
                Err((Failed::Gone, e)) => return Err(e),
            }
        }
    }
}

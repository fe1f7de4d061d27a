//! How bytes move, with no opinion on who moves them.
//!
//! * [`Outbound`] — a response on its way out: a queue of [`Chunk`]s (memory or
//!   file ranges) written with `writev` and `sendfile`. Every write reports
//!   [`Progress::Done`] or [`Progress::Blocked`], so the same code serves a
//!   blocking socket (a timed-out `SO_SNDTIMEO` shows up as `Blocked`) and a
//!   non-blocking one driven by epoll.
//! * [`listener`] — bound listening sockets with the options a server wants;
//!   [`accept`] — taking connections off them, and the one reading of
//!   accept(2)'s errors every accepting loop shares.
//! * [`Shutdown`] — a stop flag that also wakes threads waiting for a listener.
//! * [`Wire`] — the byte stream a connection is driven over: a socket, or
//!   bytes in memory in tests.
//! * [`Stream`] — an accepted client connection, plain or TLS ([`tls`]:
//!   rustls, the certificates chosen by SNI and reloaded on request).
//! * [`systemd`] — a listening socket handed in by socket activation, and
//!   the state told back to the service manager.
//! * [`slab`] and [`deadlines`] — what an event loop keeps its connections
//!   and their timeouts in (`event`, `amped` and the director's loop);
//!   [`turn`] — what such a loop's turn keeps that names no connection (the
//!   wait's timeout, an accept pause, the stop and its graceful finish).
#![warn(missing_docs)]

pub mod accept;
pub mod deadlines;
pub mod keeper;
pub mod listener;
mod outbound;
pub mod poller;
mod shutdown;
pub mod slab;
mod stream;
pub mod systemd;
pub mod tls;
pub mod turn;
mod wire;

pub use outbound::{Chunk, Data, FilePages, Outbound, Progress};
pub use shutdown::{Shutdown, Wake};
pub use stream::Stream;
pub use wire::{not_now, Wire};

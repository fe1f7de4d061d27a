//! Per-thread spares: allocations of finished requests (read buffers,
//! request and response heads, response queues, log records) kept for the
//! next request on the same thread, instead of in the connections, so idle
//! connections hold none and a busy thread allocates none. Per thread,
//! because a lock would cost more than the allocation it saves.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's spares of one kind: at most `keep` of them, and only those
/// that `fits` (items grown unusually large are freed, so a pool stays
/// small). Declared in a `thread_local!` with [`Spares::new`].
pub(crate) struct Spares<T> {
    items: RefCell<Vec<T>>,
    keep: usize,
    fits: fn(&T) -> bool,
}

impl<T> Spares<T> {
    pub(crate) const fn new(keep: usize, fits: fn(&T) -> bool) -> Spares<T> {
        Spares { items: RefCell::new(Vec::new()), keep, fits }
    }
}

/// One of this thread's spares, if it has any.
pub(crate) fn take<T: 'static>(spares: &'static LocalKey<Spares<T>>) -> Option<T> {
    spares.with(|spares| spares.items.borrow_mut().pop())
}

/// Keeps `item` for a later [`take`] if it fits and the pool has room;
/// else it is freed.
pub(crate) fn give_back<T: 'static>(spares: &'static LocalKey<Spares<T>>, item: T) {
    // During thread exit the pool may already be gone; then `item` is freed.
    let _ = spares.try_with(|spares| {
        let mut items = spares.items.borrow_mut();
        if items.len() < spares.keep && (spares.fits)(&item) {
            items.push(item);
        }
    });
}

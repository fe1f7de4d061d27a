//! Per-thread spares: allocations of finished requests (read buffers,
//! response heads and queues, log records) kept for the next request on
//! the same thread, instead of in the connections, so idle connections
//! hold none and a busy thread allocates none.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's spares of one kind.
pub(crate) type Spares<T> = LocalKey<RefCell<Vec<T>>>;

/// One of this thread's spares, if it has any.
pub(crate) fn take<T: 'static>(spares: &'static Spares<T>) -> Option<T> {
    spares.with_borrow_mut(Vec::pop)
}

/// Keeps `item` for a later [`take`] unless `keep` are kept already. The
/// callers drop items grown unusually large first, so a pool stays small.
pub(crate) fn give_back<T: 'static>(spares: &'static Spares<T>, item: T, keep: usize) {
    // During thread exit the pool may already be gone; then `item` is freed.
    let _ = spares.try_with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.len() < keep {
            spares.push(item);
        }
    });
}

//! Misses in flight: concurrent requests for a document that is not in
//! memory wait for one read of it instead of each reading it (request
//! coalescing, as nginx's `proxy_cache_lock` and Varnish do; paper 004's
//! same-document grouping, `--schedule srpt-group`).
//!
//! When the working set does not fit in memory, N requests arriving together
//! for one document would each read it from the disk — the page cache may
//! have evicted it by the time the second read comes. Here the first
//! request (the *leader*) reads it; the others wait for that read and are
//! answered from what it put in the cache. A failed read answers them all
//! with the same error, and a leader that panics releases them (they then
//! read for themselves), so no one waits forever.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// What a leader's read gave its followers: `T` is what was read (a
/// cache entry).
#[derive(Clone, Debug)]
pub(crate) enum Landed<T> {
    /// The document, now in the cache.
    Entry(T),
    /// The read failed: each follower answers with this error.
    Failed(io::ErrorKind, String),
    /// Nothing to share (not found, not cacheable, or the leader died):
    /// each follower looks for itself.
    Nothing,
}

#[derive(Debug)]
struct Flight<T> {
    landed: Mutex<Option<Landed<T>>>,
    done: Condvar,
    /// Followers waiting (for tests).
    waiting: AtomicUsize,
}

impl<T> Default for Flight<T> {
    fn default() -> Flight<T> {
        Flight { landed: Mutex::new(None), done: Condvar::new(), waiting: AtomicUsize::new(0) }
    }
}

/// The documents being read now, by path.
#[derive(Debug)]
pub(crate) struct Flights<T> {
    flying: Mutex<HashMap<Box<str>, Arc<Flight<T>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Flights<T> {
        Flights { flying: Mutex::new(HashMap::new()) }
    }
}

/// What [`Flights::board`] decided.
pub(crate) enum Boarding<'a, T> {
    /// This request reads the document; [`Leader::land`] tells the others.
    Leader(Leader<'a, T>),
    /// Another request read it meanwhile: its outcome.
    Followed(Landed<T>),
}

/// The request that reads a document for everyone waiting on it.
pub(crate) struct Leader<'a, T> {
    flights: &'a Flights<T>,
    key: Box<str>,
    flight: Arc<Flight<T>>,
    landed: bool,
}

impl<T: Clone> Flights<T> {
    /// Joins the read of `key` in flight, waiting for it to land, or starts
    /// one and leads it.
    pub(crate) fn board(&self, key: &str) -> Boarding<'_, T> {
        let mut flying = self.flying.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(flight) = flying.get(key).cloned() {
            drop(flying);
            flight.waiting.fetch_add(1, Ordering::Relaxed);
            let mut landed = flight.landed.lock().unwrap_or_else(PoisonError::into_inner);
            while landed.is_none() {
                landed = flight.done.wait(landed).unwrap_or_else(PoisonError::into_inner);
            }
            return Boarding::Followed(landed.clone().unwrap_or(Landed::Nothing));
        }
        let flight = Arc::new(Flight::default());
        flying.insert(key.into(), flight.clone());
        Boarding::Leader(Leader { flights: self, key: key.into(), flight, landed: false })
    }

    /// Followers waiting on `key` now.
    #[cfg(test)]
    pub(crate) fn waiting(&self, key: &str) -> usize {
        let flying = self.flying.lock().unwrap();
        flying.get(key).map_or(0, |f| f.waiting.load(Ordering::Relaxed))
    }
}

impl<T> Leader<'_, T> {
    /// The read is done: wake the followers with `landed`.
    pub(crate) fn land(mut self, landed: Landed<T>) {
        self.finish(landed);
    }

    fn finish(&mut self, landed: Landed<T>) {
        if std::mem::replace(&mut self.landed, true) {
            return;
        }
        // Out of the table first: a request arriving from now on finds the
        // cache filled (or reads again, if there was nothing to keep).
        self.flights.flying.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.key);
        *self.flight.landed.lock().unwrap_or_else(PoisonError::into_inner) = Some(landed);
        self.flight.done.notify_all();
    }
}

impl<T> Drop for Leader<'_, T> {
    /// A leader that never landed (it panicked) still releases its followers.
    fn drop(&mut self) {
        self.finish(Landed::Nothing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What the tests read: a document's bytes.
    type Doc = Arc<[u8]>;

    /// Leads one flight and holds it until `followers` wait on it, then lands `landed`.
    fn fly(followers: usize, landed: Landed<Doc>) -> (usize, Vec<Landed<Doc>>) {
        let flights = Flights::default();
        let reads = AtomicUsize::new(0);
        let outcomes = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            let Boarding::Leader(leader) = flights.board("/doc") else { panic!("the first leads") };
            reads.fetch_add(1, Ordering::SeqCst);
            for _ in 0..followers {
                s.spawn(|| match flights.board("/doc") {
                    Boarding::Followed(landed) => outcomes.lock().unwrap().push(landed),
                    Boarding::Leader(_) => {
                        reads.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            // No sleep decides this: the leader lands once all are waiting.
            while flights.waiting("/doc") < followers {
                std::thread::yield_now();
            }
            leader.land(landed);
        });
        (reads.into_inner(), outcomes.into_inner().unwrap())
    }

    #[test]
    fn one_read_answers_everyone_waiting() {
        let (reads, outcomes) = fly(7, Landed::Entry(Arc::from(&b"hello"[..])));
        assert_eq!(reads, 1);
        assert_eq!(outcomes.len(), 7);
        assert!(outcomes.iter().all(|o| matches!(o, Landed::Entry(e) if &e[..] == b"hello")));
    }

    #[test]
    fn a_failed_read_fails_everyone_waiting_and_no_one_hangs() {
        let (reads, outcomes) = fly(5, Landed::Failed(io::ErrorKind::Other, "EIO".into()));
        assert_eq!(reads, 1);
        assert_eq!(outcomes.len(), 5);
        assert!(outcomes.iter().all(|o| matches!(o, Landed::Failed(io::ErrorKind::Other, m) if m == "EIO")));
    }

    #[test]
    fn a_leader_that_dies_releases_its_followers() {
        let flights = Flights::<Doc>::default();
        let released = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let Boarding::Leader(leader) = flights.board("/doc") else { panic!() };
            s.spawn(|| {
                if let Boarding::Followed(Landed::Nothing) = flights.board("/doc") {
                    released.fetch_add(1, Ordering::SeqCst);
                }
            });
            while flights.waiting("/doc") < 1 {
                std::thread::yield_now();
            }
            drop(leader); // as a panic would
        });
        assert_eq!(released.into_inner(), 1);
        // The next request for it leads a new read.
        assert!(matches!(flights.board("/doc"), Boarding::Leader(_)));
    }

    #[test]
    fn different_documents_fly_apart() {
        let flights = Flights::<Doc>::default();
        let a = flights.board("/a");
        let b = flights.board("/b");
        assert!(matches!((a, b), (Boarding::Leader(_), Boarding::Leader(_))));
    }
}

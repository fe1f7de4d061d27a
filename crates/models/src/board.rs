//! The process models' shared statistics board: how the admin listener
//! sees the counters, histograms and scoreboard of every child, Apache's
//! shared-memory scoreboard without `unsafe`.
//!
//! One memory file (`memfd_create`, made before the first fork and
//! inherited by every child) holds a *ledger* and one fixed-size *slot* per
//! possible child. A child owns its slot while it lives: its housekeeping
//! thread `pwrite`s its whole [`Snapshot`] (its wire form) there every
//! 250 ms and once more at exit. Nothing is mapped, so no raw pointers and
//! no `unsafe`: readers `pread` — a few tens of KiB per child, once per
//! admin request.
//!
//! **Torn reads.** Each region starts with a sequence number, a seqlock
//! done with system calls: the writer stores it odd, writes the body, then
//! stores it even again; a reader reads the number, the body and the number
//! again and retries unless both are the same even value (after 100 tries
//! the reader's last whole read of that region stands in). Each region has
//! one writer (the child for its slot, the master for the ledger).
//!
//! **Totals never go backwards.** When the master reaps a child it reads
//! the dead child's slot (no writer any more), adds its counters to the
//! *retired* totals in the ledger (gauges — open connections, queue
//! lengths, cache bytes — end with the process and are dropped) and marks
//! the slot's tag as folded, in one ledger write. A reader reads the slots
//! first, then the ledger, and skips a slot whose tag the ledger has
//! folded, so a child is counted exactly once whether its death falls
//! before, between or after those reads. Tags are the master's child
//! serials plus one; they only grow, so a slot's folded mark is "every tag
//! up to this one". What a child counted after its last publication is
//! lost only if it dies without exiting (SIGKILL, a crash): at most one
//! housekeeping period.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use pipeline::stats::Snapshot;

/// Bytes of a slot's header: sequence, tag, body length.
const SLOT_HEAD: usize = 24;
/// Bytes of the ledger's header: sequence, body length.
const LEDGER_HEAD: usize = 16;

/// Reads retried while a writer is mid-write before a region is skipped
/// (a write takes microseconds; a skip only delays that region by one read).
const TORN_RETRIES: usize = 100;

/// The board: slots for `slots` children of up to `workers` scoreboard lines.
#[derive(Debug)]
pub(crate) struct Board {
    file: File,
    slots: usize,
    slot_len: usize,
    ledger_len: usize,
    workers: usize,
    last_read: std::sync::Mutex<LastRead>,
}

/// What one slot held.
enum SlotRead {
    /// Never written.
    Empty,
    /// Its owner's tag and last snapshot.
    Written(u64, Snapshot),
    /// Torn through every retry, or unreadable.
    Unreadable,
}

/// The last whole read of each region, in the reading process.
#[derive(Debug, Default)]
struct LastRead {
    slots: Vec<Option<(u64, Snapshot)>>,
    ledger: Option<(Vec<u64>, Snapshot)>,
}

/// What the master keeps to write the ledger.
#[derive(Debug)]
pub(crate) struct Ledger {
    seq: u64,
    /// The counters of every reaped child, added up.
    retired: Snapshot,
    /// Per slot, the highest tag folded into `retired`.
    folded: Vec<u64>,
}

/// A child's writing end of its slot.
#[derive(Debug)]
pub(crate) struct SlotWriter {
    slot: usize,
    tag: u64,
    seq: u64,
    wire: Vec<u8>,
}

impl Board {
    /// A board for `slots` children whose scoreboards have up to `workers` lines.
    pub(crate) fn create(slots: usize, workers: usize) -> io::Result<(Board, Ledger)> {
        let fd = rustix::fs::memfd_create("modus-stats", rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        let slot_len = SLOT_HEAD + Snapshot::wire_len(workers);
        let ledger_len = LEDGER_HEAD + 4 + 8 * slots + Snapshot::wire_len(0);
        // A sparse file: only the pages children write take memory.
        file.set_len((ledger_len + slots * slot_len) as u64)?;
        let board = Board { file, slots, slot_len, ledger_len, workers, last_read: Default::default() };
        let mut ledger = Ledger { seq: 0, retired: Snapshot::empty(Duration::ZERO), folded: vec![0; slots] };
        let mut seq = 0;
        board.write_ledger(&mut seq, &ledger)?;
        ledger.seq = seq;
        Ok((board, ledger))
    }

    /// Slots (children) the board has room for.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    fn slot_at(&self, slot: usize) -> u64 {
        (self.ledger_len + slot * self.slot_len) as u64
    }

    /// The writing end for the child with `serial` in `slot`; it carries
    /// on the slot's sequence numbers (the slot's previous owner is dead).
    pub(crate) fn writer(&self, slot: usize, serial: u32) -> io::Result<SlotWriter> {
        let mut head = [0u8; 8];
        self.file.read_exact_at(&mut head, self.slot_at(slot))?;
        let seq = u64::from_le_bytes(head);
        Ok(SlotWriter { slot, tag: u64::from(serial) + 1, seq: seq + (seq & 1), wire: Vec::new() })
    }

    /// Publishes a child's snapshot into its slot.
    pub(crate) fn publish(&self, w: &mut SlotWriter, snap: &Snapshot) -> io::Result<()> {
        snap.encode(self.workers, &mut w.wire);
        let at = self.slot_at(w.slot);
        w.seq += 1;
        self.file.write_all_at(&w.seq.to_le_bytes(), at)?;
        let mut body = Vec::with_capacity(16 + w.wire.len());
        body.extend_from_slice(&w.tag.to_le_bytes());
        body.extend_from_slice(&(w.wire.len() as u64).to_le_bytes());
        body.extend_from_slice(&w.wire);
        self.file.write_all_at(&body, at + 8)?;
        w.seq += 1;
        self.file.write_all_at(&w.seq.to_le_bytes(), at)
    }

    /// Reads `len` bytes at `at` under the region's seqlock (the sequence
    /// number is the first 8 bytes); `None` if a writer kept it torn.
    fn read_consistent(&self, at: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut seq_again = [0u8; 8];
        for _ in 0..TORN_RETRIES {
            self.file.read_exact_at(&mut buf, at).ok()?;
            self.file.read_exact_at(&mut seq_again, at).ok()?;
            let seq = u64::from_le_bytes(buf[..8].try_into().ok()?);
            if seq & 1 == 0 && seq.to_le_bytes() == seq_again {
                return Some(buf);
            }
            std::thread::yield_now();
        }
        None
    }

    /// A slot's tag and snapshot.
    fn read_slot(&self, slot: usize, now: Duration) -> SlotRead {
        let at = self.slot_at(slot);
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        // The header first: most slots of a large prefork are unused, and
        // a used one is read only as far as its body goes.
        let mut head = [0u8; SLOT_HEAD];
        if self.file.read_exact_at(&mut head, at).is_err() {
            return SlotRead::Unreadable;
        }
        if word(&head, 8) == 0 {
            return SlotRead::Empty;
        }
        let guess = (SLOT_HEAD + word(&head, 16) as usize).min(self.slot_len);
        for len in [guess, self.slot_len] {
            let Some(buf) = self.read_consistent(at, len) else { return SlotRead::Unreadable };
            let (tag, body) = (word(&buf, 8), word(&buf, 16) as usize);
            // The body grew since the header was read: read it all.
            if SLOT_HEAD + body <= buf.len() {
                return match Snapshot::decode(&buf[SLOT_HEAD..SLOT_HEAD + body], now) {
                    Some(snap) => SlotRead::Written(tag, snap),
                    None => SlotRead::Unreadable,
                };
            }
        }
        SlotRead::Unreadable
    }

    fn read_ledger(&self) -> Option<(Vec<u64>, Snapshot)> {
        let buf = self.read_consistent(0, self.ledger_len)?;
        let len = u64::from_le_bytes(buf[8..16].try_into().ok()?) as usize;
        let body = buf.get(LEDGER_HEAD..LEDGER_HEAD + len)?;
        let n = u32::from_le_bytes(body.get(..4)?.try_into().ok()?) as usize;
        let folded = (0..n)
            .map(|i| {
                body.get(4 + 8 * i..12 + 8 * i).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            })
            .collect::<Option<Vec<u64>>>()?;
        let retired = Snapshot::decode(&body[4 + 8 * n..], Duration::ZERO)?;
        Some((folded, retired))
    }

    fn write_ledger(&self, seq: &mut u64, ledger: &Ledger) -> io::Result<()> {
        let mut wire = Vec::new();
        ledger.retired.encode(0, &mut wire);
        let mut body = Vec::with_capacity(12 + 8 * ledger.folded.len() + wire.len());
        body.extend_from_slice(&((4 + 8 * ledger.folded.len() + wire.len()) as u64).to_le_bytes());
        body.extend_from_slice(&(ledger.folded.len() as u32).to_le_bytes());
        for tag in &ledger.folded {
            body.extend_from_slice(&tag.to_le_bytes());
        }
        body.extend_from_slice(&wire);
        *seq += 1;
        self.file.write_all_at(&seq.to_le_bytes(), 0)?;
        self.file.write_all_at(&body, 8)?;
        *seq += 1;
        self.file.write_all_at(&seq.to_le_bytes(), 0)
    }

    /// The master, after reaping the child `serial` of `slot`: adds what it
    /// published last to the retired totals and marks it folded.
    pub(crate) fn fold(&self, ledger: &mut Ledger, slot: usize, serial: u32) -> io::Result<()> {
        let tag = u64::from(serial) + 1;
        if let SlotRead::Written(found, mut last) = self.read_slot(slot, Duration::ZERO) {
            if found == tag {
                // Gauges end with the process.
                last.conns = [0; 4];
                last.cache.bytes = 0;
                last.cgi_running = 0;
                last.workers.clear();
                for q in &mut last.queues {
                    q.len = 0;
                    q.threads = 0;
                }
                ledger.retired.merge(&last);
            }
        }
        ledger.folded[slot] = ledger.folded[slot].max(tag);
        let mut seq = ledger.seq;
        let written = self.write_ledger(&mut seq, ledger);
        ledger.seq = seq;
        written
    }

    /// The whole server: every live child's last publication plus the
    /// retired totals, at `now` (the reader's uptime).
    /// A region a writer kept torn through every retry counts as it was
    /// last read, so the totals stay whole.
    pub(crate) fn total(&self, now: Duration) -> Snapshot {
        let mut last = self.last_read.lock().unwrap_or_else(|e| e.into_inner());
        if last.slots.len() != self.slots {
            last.slots = vec![None; self.slots];
        }
        let mut live = Vec::new();
        for i in 0..self.slots {
            match self.read_slot(i, now) {
                SlotRead::Empty => last.slots[i] = None,
                SlotRead::Written(tag, snap) => {
                    last.slots[i] = Some((tag, snap.clone()));
                    live.push((i, tag, snap));
                }
                SlotRead::Unreadable => {
                    if let Some((tag, mut snap)) = last.slots[i].clone() {
                        for w in &mut snap.workers {
                            w.for_how_long = now.saturating_sub(w.since);
                        }
                        live.push((i, tag, snap));
                    }
                }
            }
        }
        let mut total = Snapshot::empty(now);
        let (folded, retired) = match self.read_ledger() {
            Some(ledger) => {
                last.ledger = Some(ledger.clone());
                ledger
            }
            None => last.ledger.clone().unwrap_or_else(|| (vec![0; self.slots], Snapshot::empty(now))),
        };
        total.merge(&retired);
        for (slot, tag, snap) in &live {
            if *tag > folded.get(*slot).copied().unwrap_or(0) {
                total.merge(snap);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::stats::{ConnState, Stats};

    fn child_stats(requests: u64) -> Stats {
        let s = Stats::new(true);
        for _ in 0..requests {
            s.count_response(200, 10);
        }
        s.move_conn(ConnState::None, ConnState::KeepAlive);
        let _ = s.queue("handoff", 2);
        s
    }

    #[test]
    fn children_add_up_and_reaped_ones_stay_counted() {
        let (board, mut ledger) = Board::create(2, 4).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), 0);
        let a = child_stats(3);
        let b = child_stats(5);
        let _wa = a.worker("10/worker-0".into());
        let mut wa = board.writer(0, 7).unwrap();
        let mut wb = board.writer(1, 8).unwrap();
        board.publish(&mut wa, &a.snapshot()).unwrap();
        board.publish(&mut wb, &b.snapshot()).unwrap();
        let t = board.total(Duration::from_secs(1));
        assert_eq!(t.requests(), 8);
        assert_eq!(t.conns_open(), 2);
        assert_eq!(t.workers.len(), 1);
        assert_eq!(t.queues.len(), 1);
        assert_eq!(t.queues[0].threads, 4);

        // Child 7 dies: its counters stay, its gauges go.
        board.fold(&mut ledger, 0, 7).unwrap();
        let t = board.total(Duration::from_secs(1));
        assert_eq!(t.requests(), 8, "counted once after the fold");
        assert_eq!(t.conns_open(), 1);
        assert!(t.workers.is_empty());

        // A new child in the same slot starts from zero and adds on.
        let c = child_stats(1);
        let mut wc = board.writer(0, 9).unwrap();
        assert_eq!(wc.seq % 2, 0);
        assert!(wc.seq >= 2, "carries on the slot's sequence");
        board.publish(&mut wc, &c.snapshot()).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), 9);
        board.fold(&mut ledger, 0, 9).unwrap();
        board.fold(&mut ledger, 1, 8).unwrap();
        let t = board.total(Duration::ZERO);
        assert_eq!(t.requests(), 9);
        assert_eq!(t.conns_open(), 0);
    }

    #[test]
    fn a_reader_racing_a_writer_sees_whole_snapshots() {
        let (board, _ledger) = Board::create(1, 4).unwrap();
        let stats = Stats::new(true);
        let mut w = board.writer(0, 0).unwrap();
        board.publish(&mut w, &stats.snapshot()).unwrap();
        const ROUNDS: u64 = 500;
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    stats.count_response(200, 1);
                    board.publish(&mut w, &stats.snapshot()).unwrap();
                }
            });
            let mut last = 0;
            while last < ROUNDS {
                let t = board.total(Duration::ZERO);
                // A torn read would mix two snapshots: bytes and responses
                // are written together and must agree.
                assert_eq!(t.bytes, t.requests(), "torn read");
                assert!(t.requests() >= last, "went backwards");
                last = t.requests();
            }
        });
    }

    #[test]
    fn a_torn_slot_is_not_read() {
        let (board, _ledger) = Board::create(1, 1).unwrap();
        let mut w = board.writer(0, 0).unwrap();
        board.publish(&mut w, &child_stats(2).snapshot()).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), 2);
        // A writer caught mid-write: odd sequence.
        board.file.write_all_at(&(w.seq + 1).to_le_bytes(), board.slot_at(0)).unwrap();
        assert!(matches!(board.read_slot(0, Duration::ZERO), SlotRead::Unreadable));
        assert_eq!(board.total(Duration::ZERO).requests(), 2, "the last whole read stands in");
        board.file.write_all_at(&(w.seq + 2).to_le_bytes(), board.slot_at(0)).unwrap();
        assert!(matches!(board.read_slot(0, Duration::ZERO), SlotRead::Written(1, s) if s.requests() == 2));
    }
}

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
//! stores it even again. The ledger is one body: a reader reads the number,
//! the body and the number again and retries unless both are the same even
//! value (after 100 tries the reader's last whole read stands in). A slot
//! is two bodies (halves): publication `v` (the sequence is `2v` once it is
//! complete) goes to half `v % 2`, so the half the sequence names is never
//! the one being written, and a reader's copy of it is whole unless the
//! writer got as far as starting publication `v + 2`. A child that dies
//! mid-write (SIGKILL, or `exit` racing its housekeeping thread) thus
//! leaves its previous publication whole for the master to fold. Each
//! region has one writer (the child for its slot, the master for the ledger).
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

use pipeline::stats::{CacheSnap, Snapshot};

/// Bytes of a slot's sequence number, before its two halves.
const SLOT_SEQ: usize = 8;
/// Bytes of a half's header: tag, body length.
const HALF_HEAD: usize = 16;
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
    /// Bytes of one half of a slot: header and the largest snapshot.
    half_len: usize,
    ledger_len: usize,
    workers: usize,
    last_read: std::sync::Mutex<LastRead>,
}

/// What one slot held.
enum SlotRead {
    /// Never written.
    Empty,
    /// Its owner's tag and last snapshot.
    Written(u64, Box<Snapshot>),
    /// Overwritten under every retry, or unreadable.
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
    /// Always even between publications: twice the publications completed.
    seq: u64,
    wire: Vec<u8>,
}

impl Board {
    /// A board for `slots` children whose scoreboards have up to `workers` lines.
    pub(crate) fn create(slots: usize, workers: usize) -> io::Result<(Board, Ledger)> {
        let fd = rustix::fs::memfd_create("modus-stats", rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        let half_len = HALF_HEAD + Snapshot::wire_len(workers);
        let ledger_len = LEDGER_HEAD + 4 + 8 * slots + Snapshot::wire_len(0);
        // A sparse file: only the pages children write take memory.
        file.set_len((ledger_len + slots * (SLOT_SEQ + 2 * half_len)) as u64)?;
        let board = Board { file, slots, half_len, ledger_len, workers, last_read: Default::default() };
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
        (self.ledger_len + slot * (SLOT_SEQ + 2 * self.half_len)) as u64
    }

    /// Where publication `version` of `slot` lives.
    fn half_at(&self, slot: usize, version: u64) -> u64 {
        self.slot_at(slot) + (SLOT_SEQ + (version % 2) as usize * self.half_len) as u64
    }

    /// The writing end for the child with `serial` in `slot`; it carries
    /// on the slot's sequence numbers (the slot's previous owner is dead).
    /// An odd sequence is a write the previous owner died in: its next
    /// publication goes to that torn half again, never over the whole one.
    pub(crate) fn writer(&self, slot: usize, serial: u32) -> io::Result<SlotWriter> {
        let mut head = [0u8; 8];
        self.file.read_exact_at(&mut head, self.slot_at(slot))?;
        let seq = u64::from_le_bytes(head);
        Ok(SlotWriter { slot, tag: u64::from(serial) + 1, seq: seq & !1, wire: Vec::new() })
    }

    /// Publishes a child's snapshot into its slot.
    pub(crate) fn publish(&self, w: &mut SlotWriter, snap: &Snapshot) -> io::Result<()> {
        snap.encode(self.workers, &mut w.wire);
        let at = self.slot_at(w.slot);
        let version = w.seq / 2 + 1;
        w.seq += 1;
        self.file.write_all_at(&w.seq.to_le_bytes(), at)?;
        let mut body = Vec::with_capacity(HALF_HEAD + w.wire.len());
        body.extend_from_slice(&w.tag.to_le_bytes());
        body.extend_from_slice(&(w.wire.len() as u64).to_le_bytes());
        body.extend_from_slice(&w.wire);
        self.file.write_all_at(&body, self.half_at(w.slot, version))?;
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

    /// A slot's tag and its last complete snapshot, even if its writer is
    /// (or died) mid-write.
    fn read_slot(&self, slot: usize, now: Duration) -> SlotRead {
        let at = self.slot_at(slot);
        let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let read_seq = || {
            let mut seq = [0u8; 8];
            self.file.read_exact_at(&mut seq, at).ok().map(|()| u64::from_le_bytes(seq))
        };
        let mut head = [0u8; HALF_HEAD];
        let mut body = Vec::new();
        for _ in 0..TORN_RETRIES {
            let Some(seq) = read_seq() else { return SlotRead::Unreadable };
            let version = seq / 2;
            // Most slots of a large prefork were never written.
            if version == 0 {
                return SlotRead::Empty;
            }
            let half = self.half_at(slot, version);
            if self.file.read_exact_at(&mut head, half).is_err() {
                return SlotRead::Unreadable;
            }
            // Read only as far as the body goes; a length past the half is
            // a header caught mid-write.
            let len = word(&head, 8) as usize;
            let whole = len <= self.half_len - HALF_HEAD && {
                body.resize(len, 0);
                self.file.read_exact_at(&mut body, half + HALF_HEAD as u64).is_ok()
            };
            // This half is rewritten only by publication `version + 2`,
            // which starts by storing the sequence `2 * version + 3`.
            match read_seq() {
                Some(again) if whole && again <= 2 * version + 2 => {
                    return match Snapshot::decode(&body, now) {
                        Some(snap) => SlotRead::Written(word(&head, 0), Box::new(snap)),
                        None => SlotRead::Unreadable,
                    };
                }
                Some(_) => std::thread::yield_now(),
                None => return SlotRead::Unreadable,
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
    /// published last to the retired totals and marks it folded. A child
    /// that died mid-write still has its previous publication whole.
    pub(crate) fn fold(&self, ledger: &mut Ledger, slot: usize, serial: u32) -> io::Result<()> {
        let tag = u64::from(serial) + 1;
        if let SlotRead::Written(found, mut last) = self.read_slot(slot, Duration::ZERO) {
            if found == tag {
                // Gauges end with the process.
                last.conns = [0; 4];
                last.cache =
                    CacheSnap { hits: last.cache.hits, misses: last.cache.misses, ..CacheSnap::default() };
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
                    last.slots[i] = Some((tag, (*snap).clone()));
                    live.push((i, tag, *snap));
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
    fn a_torn_slot_reads_its_last_whole_publication() {
        let (board, _ledger) = Board::create(1, 1).unwrap();
        let mut w = board.writer(0, 0).unwrap();
        board.publish(&mut w, &child_stats(2).snapshot()).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), 2);
        // A writer caught mid-write: odd sequence, and the next half
        // already scribbled on.
        let at = board.slot_at(0);
        board.file.write_all_at(&(w.seq + 1).to_le_bytes(), at).unwrap();
        board.file.write_all_at(&[0xff; 64], board.half_at(0, w.seq / 2 + 1)).unwrap();
        assert!(matches!(board.read_slot(0, Duration::ZERO), SlotRead::Written(1, s) if s.requests() == 2));
        assert_eq!(board.total(Duration::ZERO).requests(), 2);
        board.file.write_all_at(&(w.seq + 2).to_le_bytes(), at).unwrap();
        assert!(matches!(board.read_slot(0, Duration::ZERO), SlotRead::Unreadable), "garbage is not decoded");
    }

    /// A child that exits or is killed mid-publish: the master folds its
    /// previous publication, and the totals never go backwards.
    #[test]
    fn a_child_dead_mid_publish_is_folded_from_its_last_whole_publication() {
        let (board, mut ledger) = Board::create(2, 2).unwrap();
        let other = child_stats(4);
        let mut wo = board.writer(1, 1).unwrap();
        board.publish(&mut wo, &other.snapshot()).unwrap();

        let dying = child_stats(3);
        let mut w = board.writer(0, 5).unwrap();
        board.publish(&mut w, &dying.snapshot()).unwrap();
        dying.count_response(200, 10);
        board.publish(&mut w, &dying.snapshot()).unwrap();
        let before = board.total(Duration::ZERO).requests();
        assert_eq!(before, 8);

        // The next publication dies halfway: sequence odd, half its bytes.
        dying.count_response(200, 10);
        let mut wire = Vec::new();
        dying.snapshot().encode(board.workers, &mut wire);
        let mut half = Vec::new();
        half.extend_from_slice(&w.tag.to_le_bytes());
        half.extend_from_slice(&(wire.len() as u64).to_le_bytes());
        half.extend_from_slice(&wire[..wire.len() / 2]);
        board.file.write_all_at(&(w.seq + 1).to_le_bytes(), board.slot_at(0)).unwrap();
        board.file.write_all_at(&half, board.half_at(0, w.seq / 2 + 1)).unwrap();
        drop(w);

        assert_eq!(board.total(Duration::ZERO).requests(), before, "live read of a torn slot");
        board.fold(&mut ledger, 0, 5).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), before, "the fold kept the child's history");

        // The slot's next owner writes over the torn half, not the folded one.
        let next = child_stats(1);
        let mut wn = board.writer(0, 6).unwrap();
        assert_eq!(wn.seq % 2, 0);
        board.publish(&mut wn, &next.snapshot()).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), before + 1);
        board.fold(&mut ledger, 0, 6).unwrap();
        board.fold(&mut ledger, 1, 1).unwrap();
        assert_eq!(board.total(Duration::ZERO).requests(), before + 1);
    }
}

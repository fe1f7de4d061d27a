use super::shard::{shard_claim, CLAIMED};
use super::*;
use std::sync::atomic::AtomicUsize;

#[test]
fn buckets_are_contiguous_and_narrow() {
    let mut prev_high = 0;
    for i in 0..BUCKETS {
        let (lo, hi) = bucket_range(i);
        assert_eq!(lo, prev_high, "bucket {i}");
        assert_eq!(bucket_of(lo), i);
        assert_eq!(bucket_of(hi - 1), i);
        if lo >= 8 {
            assert!((hi - lo) * 8 <= lo, "≤ 12.5% wide");
        }
        prev_high = hi;
    }
    assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
}

#[test]
fn quantiles_and_counts() {
    let s = Stats::new(true);
    for us in 1..=100u64 {
        s.record(Phase::Write, Duration::from_micros(us));
    }
    s.count_response(200, 10);
    s.count_response(404, 5);
    s.move_conn(ConnState::None, ConnState::Reading);
    s.move_conn(ConnState::Reading, ConnState::KeepAlive);
    let snap = s.snapshot();
    let h = snap.phase(Phase::Write);
    assert_eq!(h.count(), 100);
    let p50 = h.quantile(0.5).as_nanos() as f64;
    assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.07, "{p50}");
    assert!((h.mean().as_micros() as i64 - 50).abs() <= 1);
    assert_eq!(h.count_below(1 << 17), 100); // 131 µs
    assert_eq!(snap.requests(), 2);
    assert_eq!(snap.by_status().collect::<Vec<_>>(), vec![(200, 1), (404, 1)]);
    assert_eq!(snap.bytes, 15);
    assert_eq!(snap.conns(ConnState::KeepAlive), 1);
    assert_eq!(snap.conns_open(), 1);
}

#[test]
fn wire_form_round_trips_and_merges() {
    let s = Stats::new(true);
    s.record(Phase::Parse, Duration::from_micros(3));
    s.count_response(200, 100);
    s.count_response(404, 7);
    s.move_conn(ConnState::None, ConnState::KeepAlive);
    let q = s.queue("handoff", 4);
    q.push();
    q.pop(Duration::from_micros(40));
    let w = s.worker("1234/worker-0".into());
    w.busy();
    let mut snap = s.snapshot();
    snap.cache = CacheSnap { hits: 9, misses: 2, bytes: 70_000, memory: 4_000, open_files: 3 };
    let mut wire = Vec::new();
    snap.encode(8, &mut wire);
    assert!(wire.len() <= Snapshot::wire_len(8));
    let back = Snapshot::decode(&wire, snap.uptime).expect("decodes");
    assert_eq!(back.status, snap.status);
    assert_eq!(back.phase(Phase::Parse).counts, snap.phase(Phase::Parse).counts);
    assert_eq!(back.conns(ConnState::KeepAlive), 1);
    assert_eq!(back.queues[0].name, "handoff");
    assert_eq!(back.queues[0].waits.count(), 1);
    assert_eq!(back.workers[0].name, "1234/worker-0");
    assert!(back.workers[0].busy);
    assert_eq!(back.cache, snap.cache);
    assert!(Snapshot::decode(&wire[..wire.len() - 1], snap.uptime).is_none(), "short input");

    let mut total = back.clone();
    total.merge(&back);
    assert_eq!(total.requests(), 4);
    assert_eq!(total.bytes, 214);
    assert_eq!(total.conns_open(), 2);
    assert_eq!(total.queues.len(), 1, "same name: one queue");
    assert_eq!(total.queues[0].items, 2);
    assert_eq!(total.queues[0].threads, 8);
    assert_eq!(total.workers.len(), 2);
    assert_eq!(total.phase(Phase::Parse).count(), 2);
    assert_eq!(total.cache, CacheSnap { hits: 18, misses: 4, bytes: 140_000, memory: 8_000, open_files: 6 });
}

#[test]
fn a_request_records_only_its_measured_phases() {
    let s = Stats::new(true);
    let mut phases = PhaseTimes::default();
    phases.set(Phase::Parse, 3_000);
    phases.set(Phase::Total, 0);
    assert_eq!(phases.get(Phase::Parse), Some(3_000));
    assert_eq!(phases.get(Phase::Total), Some(0), "zero is measured, not absent");
    assert_eq!(phases.get(Phase::Queue), None);
    let mut cleared = phases;
    cleared.clear();
    assert!(Phase::ALL.iter().all(|p| cleared.get(*p).is_none()));
    s.record_request(404, 120, &phases);
    s.record_request(200, 30, &phases);
    let snap = s.snapshot();
    assert_eq!(snap.by_status().collect::<Vec<_>>(), vec![(200, 1), (404, 1)]);
    assert_eq!(snap.bytes, 150);
    assert_eq!(snap.phase(Phase::Parse).count(), 2);
    assert_eq!(snap.phase(Phase::Parse).sum_ns, 6_000);
    assert_eq!(snap.phase(Phase::Parse).counts[bucket_of(3_000)], 2);
    assert_eq!(snap.phase(Phase::Total).counts[0], 2);
    for p in Phase::ALL {
        if p != Phase::Parse && p != Phase::Total {
            assert_eq!(snap.phase(p).count(), 0, "{}", p.name());
        }
    }
}

/// A reader racing a writer: every request a snapshot counts has its
/// phases and bytes in that snapshot (the admin page never shows a
/// request without its times).
#[test]
fn a_counted_request_has_its_phases_in_the_same_snapshot() {
    let s = Arc::new(Stats::new(true));
    let mut phases = PhaseTimes::default();
    phases.set(Phase::CgiSpawn, 276_000);
    phases.set(Phase::Total, 1_500_000);
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            for _ in 0..200_000 {
                s.record_request(200, 10, &phases);
            }
        })
    };
    let mut seen = 0;
    while seen < 200_000 {
        let snap = s.snapshot();
        seen = snap.requests();
        for p in [Phase::CgiSpawn, Phase::Total] {
            assert!(snap.phase(p).count() >= seen, "{}: {} < {seen}", p.name(), snap.phase(p).count());
            assert!(snap.phase(p).sum_ns >= seen * phases.get(p).unwrap(), "{}", p.name());
        }
        assert!(snap.bytes >= seen * 10);
    }
    writer.join().unwrap();
}

/// The tests that hold many claims, or count them, one at a time.
static CLAIM_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// More threads than owned shards, recording at once: owners add with
/// load and store, sharers with `fetch_add`, and no count is lost (a
/// sharer writing an owned shard, or two owners of one, would lose some).
#[test]
fn owned_and_shared_shards_lose_no_count() {
    let _alone = CLAIM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    const ROUNDS: u64 = 30_000;
    let s = Arc::new(Stats::new(true));
    let threads = 2 * SHARDS;
    let mut phases = PhaseTimes::default();
    phases.set(Phase::Parse, 1_000);
    let owners = Arc::new(AtomicUsize::new(0));
    // All alive at once, so some must share.
    let together = Arc::new(std::sync::Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (s, owners, together) = (s.clone(), owners.clone(), together.clone());
            std::thread::spawn(move || {
                if shard_claim().1 {
                    owners.fetch_add(1, Ordering::Relaxed);
                }
                together.wait();
                for _ in 0..ROUNDS {
                    s.record_request(200, 3, &phases);
                    s.move_conn(ConnState::None, ConnState::Reading);
                    s.move_conn(ConnState::Reading, ConnState::None);
                }
                together.wait();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let snap = s.snapshot();
    assert_eq!(snap.requests(), threads as u64 * ROUNDS);
    assert_eq!(snap.phase(Phase::Parse).count(), threads as u64 * ROUNDS);
    assert_eq!(snap.phase(Phase::Parse).sum_ns, threads as u64 * ROUNDS * 1_000);
    assert_eq!(snap.bytes, threads as u64 * ROUNDS * 3);
    assert_eq!(snap.conns, [0; 4]);
    assert!(owners.load(Ordering::Relaxed) <= OWNED_SHARDS);
}

/// A thread gives its shard back when it exits, for the next thread.
#[test]
fn an_exited_thread_gives_its_shard_back() {
    let _alone = CLAIM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    // Other tests' threads may hold some claims meanwhile, briefly.
    let mut given_back = 0;
    for _ in 0..2 * OWNED_SHARDS {
        let (index, owned) = std::thread::spawn(shard_claim).join().unwrap();
        if owned {
            assert!(
                !CLAIMED[index].load(Ordering::Acquire),
                "shard {index} still claimed after its thread exited"
            );
            given_back += 1;
        }
    }
    assert!(given_back > 0, "no thread found an owned shard free");
}

#[test]
fn trace_rows_are_in_microseconds_since_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.csv");
    let s = Stats::new(true).with_trace(&path, 1.0).unwrap();
    let mut phases = PhaseTimes::default();
    phases.set(Phase::Wait, 1_260);
    phases.set(Phase::DataMiss, 40_000);
    let at = |ns: u64| s.epoch_ns + ns;
    s.trace_row(&TraceRow {
        conn: 7,
        arrival: at(2_999),
        service_start: at(5_000),
        service_end: at(1_000_000),
        phases: &phases,
        data: "miss",
        status: 200,
        bytes: 512,
        path: "/a\"b",
    });
    s.flush();
    let text = std::fs::read_to_string(&path).unwrap();
    let row = text.strip_prefix(TRACE_HEADER).unwrap();
    let worker = std::thread::current().name().unwrap_or("main").to_string();
    assert_eq!(
        row,
        format!("7,2,5,1000,1.3,,,40.0,miss,,,,,200,512,\"/a\"\"b\",{}/{worker}\n", std::process::id())
    );
}

#[test]
fn instants_and_timestamps_convert_both_ways() {
    let s = Stats::new(true);
    let t = Instant::now() + Duration::from_millis(1500);
    assert_eq!(s.instant_at(s.ns_at(t)), t);
    let ns = now_ns() + 12_345;
    assert_eq!(s.ns_at(s.instant_at(ns)), ns);
    // Both are CLOCK_MONOTONIC: reading one then the other agrees to
    // well within a second (generous: the machine may be loaded).
    let (a, b) = (now_ns(), s.ns_at(Instant::now()));
    assert!(b.abs_diff(a) < 1_000_000_000, "{a} {b}");
}

#[test]
fn queue_waits_have_percentiles() {
    let s = Stats::new(true);
    let q = s.queue("read", 2);
    for us in 1..=100u64 {
        q.push();
        q.pop(Duration::from_micros(us));
    }
    let snap = s.snapshot();
    let waits = &snap.queues[0].waits;
    assert_eq!(waits.count(), 100);
    let p99 = waits.quantile(0.99).as_nanos() as f64;
    assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.07, "{p99}");
    assert!((snap.queues[0].mean_wait().as_micros() as i64 - 50).abs() <= 1);
}

#[test]
fn scoreboard_forgets_dropped_workers() {
    let s = Stats::new(true);
    let a = s.worker("a".into());
    let b = s.worker("b".into());
    a.busy();
    drop(b);
    let snap = s.snapshot();
    assert_eq!(snap.workers.len(), 1);
    assert!(snap.workers[0].busy);
    assert_eq!(snap.workers[0].served, 1);
}

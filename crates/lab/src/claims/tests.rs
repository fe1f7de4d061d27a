use super::*;

/// The servers of the built-in `tiny` experiment.
const SERVERS: &[&str] = &["pool", "event"];
use crate::results::{at, Point};

fn point(server: &str, clients: usize, repeat: u32, throughput: f64) -> Point {
    Point {
        server: server.into(),
        at: at(clients),
        repeat,
        values: crate::results::values(&[throughput, 1.5, 1.0, 2.0, 0.0, 10.0, 100.0, 0.0, 1.0, 0.0]),
    }
}

/// `point` with `metric` set (where the column exists in this version).
fn set(mut p: Point, metric: &str, v: f64) -> Point {
    if let Some(i) = METRICS.iter().position(|(m, _)| *m == metric) {
        p.values[i] = v;
    }
    p
}

fn claim(expr: &str) -> Claim {
    Claim::parse(expr, SERVERS).unwrap()
}

#[test]
fn claims_parse_and_judge_every_point() {
    let c = claim("throughput(server=event) >= 0.5 * throughput(server=pool)");
    assert_eq!(c.op, Op::Ge);
    assert_eq!(
        c.right,
        Side::Metric { factor: 0.5, metric: "throughput".into(), server: "pool".into(), fixed: Vec::new() }
    );
    assert_eq!(c.bound(), 0.5);
    let table = Table {
        points: vec![
            point("pool", 1, 1, 100.0),
            point("pool", 1, 2, 300.0),
            point("event", 1, 1, 120.0),
            point("pool", 8, 1, 1000.0),
            point("event", 8, 1, 400.0),
        ],
    };
    let v = c.judge(&table);
    let got: Vec<(&str, f64, f64, usize, &str)> =
        v.points.iter().map(|p| (p.at.as_str(), p.left, p.right, p.repeats, p.word)).collect();
    assert_eq!(
        got,
        [("clients=1", 120.0, 100.0, 1, HOLDS), ("clients=8", 400.0, 1000.0, 1, DOES_NOT_HOLD)],
        "repeats paired by number: event has no repeat 2 at 1 client, so pool's is left out"
    );
    assert_eq!((v.points[0].lo, v.points[0].mid, v.points[0].hi), (2.4, 2.4, 2.4), "one repeat: a point");
    assert_eq!(v.word, HOLDS_PARTLY);
    assert_eq!(v.repeats(), 1);
    // A fixed coordinate: pool at 8 clients against twice event's at each point.
    let fixed = claim("throughput(server=pool, clients=8) > 2 * throughput(server=event)");
    let v = fixed.judge(&table);
    assert_eq!(
        v.points.iter().map(|p| (p.left, p.right)).collect::<Vec<_>>(),
        [(1000.0, 120.0), (1000.0, 400.0)]
    );
    assert_eq!(v.word, HOLDS);
    assert_eq!(claim_word("p99(server=pool) < 5", &table), HOLDS);
    assert_eq!(claim_word("errors(server=pool) > 0", &table), DOES_NOT_HOLD, "0 > 0 misses");
    assert_eq!(claim_word("p50(server=pool) > 1", &Table::default()), NO_DATA);
}

fn claim_word(expr: &str, table: &Table) -> &'static str {
    claim(expr).judge(table).word
}

/// The interval: the ratios of the repeats paired by number (not by
/// their order in the table), factors applied; its middle the ratio of
/// the means; a repeat without its pair left out.
#[test]
fn the_interval_is_over_paired_repeats() {
    let table = Table {
        points: vec![
            point("event", 4, 3, 90.0),
            point("pool", 4, 1, 100.0),
            point("event", 4, 1, 100.0),
            point("pool", 4, 4, 10.0),
            point("pool", 4, 2, 100.0),
            point("event", 4, 2, 120.0),
            point("pool", 4, 3, 100.0),
        ],
    };
    let c = claim("throughput(server=event) >= throughput(server=pool)");
    let (lo, mid, hi) = interval(&table, &c.left, &c.right, &at(4)).unwrap();
    assert_eq!((lo, hi), (0.9, 1.2), "90/100 in round 3, 120/100 in round 2");
    assert!((mid - 310.0 / 300.0).abs() < 1e-12, "{mid}: the means of the paired repeats");
    let half = claim("throughput(server=event) >= 0.5 * throughput(server=pool)");
    let (lo, _, hi) = interval(&table, &half.left, &half.right, &at(4)).unwrap();
    assert_eq!((lo, hi), (1.8, 2.4), "the factor applied: the claim wants ≥ 1");
    let number = claim("throughput(server=event) <= 200");
    assert_eq!(interval(&table, &number.left, &number.right, &at(4)).map(|i| (i.0, i.2)), Some((0.45, 0.6)));
    assert_eq!(interval(&table, &c.left, &c.right, &at(8)), None, "nothing measured there");
    let zero = claim("throughput(server=event) >= 0");
    assert_eq!(interval(&table, &zero.left, &zero.right, &at(4)), None, "no ratio to 0");
    // Judged pair by pair: the repeats disagree.
    assert_eq!(c.judge(&table).word, WITHIN_NOISE);
}

/// Overlapping repeats are within noise; a clear win holds and a clear
/// loss does not, at every point; for > and <, equality misses.
#[test]
fn overlapping_repeats_are_within_noise() {
    let mut table = Table::default();
    for (r, (pool, event)) in [(100.0, 104.0), (103.0, 98.0), (99.0, 101.0)].into_iter().enumerate() {
        for clients in [1, 8] {
            table.points.push(point("pool", clients, r as u32 + 1, pool));
            table.points.push(point("event", clients, r as u32 + 1, event));
        }
    }
    let v = claim("throughput(server=event) >= throughput(server=pool)").judge(&table);
    assert_eq!(v.word, WITHIN_NOISE);
    assert!(v.points.iter().all(|p| p.word == WITHIN_NOISE && p.repeats == 3), "{:?}", v.points);
    let p = &v.points[0];
    assert!(p.lo < 1.0 && p.hi > 1.0 && p.lo <= p.mid && p.mid <= p.hi, "{p:?}");
    assert_eq!(claim_word("throughput(server=event) <= throughput(server=pool)", &table), WITHIN_NOISE);
    assert_eq!(claim_word("throughput(server=event) >= 0.5 * throughput(server=pool)", &table), HOLDS);
    assert_eq!(
        claim_word("throughput(server=event) <= 0.5 * throughput(server=pool)", &table),
        DOES_NOT_HOLD
    );
    assert_eq!(claim_word("throughput(server=event) > 98", &table), WITHIN_NOISE, "98 is not above 98");
    assert_eq!(claim_word("throughput(server=event) >= 98", &table), HOLDS);
    // One point holds, the other is noise: partly.
    table.points.retain(|p| !(p.server == "event" && p.at.clients == 8));
    for r in 1..=3 {
        table.points.push(point("event", 8, r, 200.0));
    }
    let v = claim("throughput(server=event) >= throughput(server=pool)").judge(&table);
    assert_eq!(v.word, HOLDS_PARTLY);
    assert_eq!(v.counts(), (1, 1, 0, 0));
}

/// No point holds, one misses clearly and the other is noise: a clear
/// miss refutes a claim made of every point, so it does not hold (not
/// "partly"), and the reason names the point that missed.
#[test]
fn a_clear_miss_beside_noise_does_not_hold() {
    let mut table = Table::default();
    for (r, (pool, event)) in [(100.0, 104.0), (103.0, 98.0), (99.0, 101.0)].into_iter().enumerate() {
        table.points.push(point("pool", 1, r as u32 + 1, pool));
        table.points.push(point("event", 1, r as u32 + 1, event));
        table.points.push(point("pool", 8, r as u32 + 1, 100.0));
        table.points.push(point("event", 8, r as u32 + 1, 50.0));
    }
    let v = claim("throughput(server=event) >= throughput(server=pool)").judge(&table);
    let words: Vec<&str> = v.points.iter().map(|p| p.word).collect();
    assert_eq!(words, [WITHIN_NOISE, DOES_NOT_HOLD]);
    assert_eq!(v.word, DOES_NOT_HOLD);
    assert!(v.reason.contains("clients=8") && !v.reason.contains("at clients=1"), "{}", v.reason);
}

/// A point where the generator fell behind (or, where those columns
/// exist, that held less than 90 % of its load, or failed) is under
/// load: it never counts, so it cannot make a claim hold.
#[test]
fn a_point_under_load_cannot_make_a_claim_hold() {
    let behind = |p: Point| set(p, "fell_behind", 1.0);
    let table = Table {
        points: vec![
            point("pool", 1, 1, 100.0),
            behind(point("event", 1, 1, 500.0)),
            point("pool", 8, 1, 100.0),
            point("event", 8, 1, 50.0),
        ],
    };
    let c = claim("throughput(server=event) >= throughput(server=pool)");
    let v = c.judge(&table);
    assert_eq!(v.points[0].word, UNDER_LOAD);
    assert!(v.points[0].reason.contains("event: the load generator fell behind"), "{:?}", v.points[0]);
    assert_eq!(v.word, DOES_NOT_HOLD, "the winning point is not counted");
    assert!(v.reason.contains("1 point not at the load it names, not counted"), "{}", v.reason);
    let only = Table { points: table.points[..2].to_vec() };
    let v = c.judge(&only);
    assert_eq!(v.word, NOT_AT_THE_LOAD);
    assert!(v.reason.contains("clients=1: event: the load generator fell behind"), "{}", v.reason);
    // A server against itself elsewhere: each side named by where it was.
    let itself = claim("throughput(server=event, clients=8) >= throughput(server=event, clients=1)");
    let v = itself.judge(&table);
    assert_eq!(v.points[0].word, UNDER_LOAD);
    assert_eq!(v.points[0].reason, "event at clients=1: the load generator fell behind");
    // The right side under load counts as much.
    let right = Table { points: vec![behind(point("pool", 1, 1, 10.0)), point("event", 1, 1, 500.0)] };
    assert_eq!(c.judge(&right).word, NOT_AT_THE_LOAD);
    if METRICS.iter().any(|(m, _)| *m == "held_load") {
        let held = |v: f64| Table {
            points: vec![point("pool", 1, 1, 10.0), set(point("event", 1, 1, 500.0), "held_load", v)],
        };
        assert_eq!(c.judge(&held(0.62)).word, NOT_AT_THE_LOAD);
        assert!(c.judge(&held(0.62)).reason.contains("held 62 % of the load it names"));
        assert_eq!(c.judge(&held(0.95)).word, HOLDS);
        assert_eq!(c.judge(&held(f64::NAN)).word, HOLDS, "not recorded: measured normally");
        let mut open = held(0.5);
        open.points.iter_mut().for_each(|p| p.at.rate = 800);
        assert_eq!(c.judge(&open).word, HOLDS, "open loop past saturation: the server's answer");
    }
    if METRICS.iter().any(|(m, _)| *m == "failed") {
        let failed = Table {
            points: vec![
                point("pool", 1, 1, 10.0),
                set(set(point("event", 1, 1, 0.0), "failed", 1.0), "throughput", f64::NAN),
            ],
        };
        let v = c.judge(&failed);
        assert_eq!((v.word, v.points[0].word), (NOT_AT_THE_LOAD, UNDER_LOAD));
        assert!(v.points[0].left.is_nan());
    }
}

/// The reason names what was saturated at the deciding points, with
/// its number, or how idle the server was; results without the
/// columns say so.
#[test]
fn the_reason_comes_from_the_points_measurements() {
    let usage = |p: Point, server: f64, load: f64, disk: f64| {
        set(
            set(set(set(p, "server_cpu_pct", server), "load_cpu_pct", load), "disk_util_pct", disk),
            "other_cpu_pct",
            2.0,
        )
    };
    let table = Table {
        points: vec![
            usage(point("pool", 1, 1, 100.0), 97.0, 40.0, 0.0),
            usage(point("event", 1, 1, 50.0), 4.0, 30.0, 0.0),
            usage(point("pool", 8, 1, 100.0), 99.0, 91.0, 70.0),
            usage(point("event", 8, 1, 200.0), 20.0, 30.0, 0.0),
        ],
    };
    let v = claim("throughput(server=event) >= throughput(server=pool)").judge(&table);
    assert_eq!(v.word, HOLDS_PARTLY);
    assert_eq!(
        v.reason,
        "Limits at clients=1: event — nothing saturated, server CPU at most 4 %: this load never stresses \
         the server; pool — server CPU saturated (up to 97 %)."
    );
    assert_eq!(v.points[1].reason, "event: nothing saturated, server CPU 20 %; pool: server CPU 99 % and the generator (CPU 91 %) and the disk (70 % busy) saturated");
    let v = claim("throughput(server=pool) >= 0.1 * throughput(server=event)").judge(&table);
    assert_eq!(v.word, HOLDS);
    assert!(v.reason.starts_with("Limits at every counted point (2): pool — server CPU saturated at 2 of 2 (up to 99 %), the generator saturated at 1 of 2 (CPU up to 91 %), the disk saturated at 1 of 2 (up to 70 % busy)"), "{}", v.reason);
    let old = Table { points: vec![point("pool", 1, 1, 100.0), point("event", 1, 1, 50.0)] };
    let v = claim("throughput(server=pool) >= throughput(server=event)").judge(&old);
    assert!(v.reason.contains("pool — not recorded"), "{}", v.reason);
    assert_eq!(
        context(Some("two 450 MHz Pentium II."), Some("2 cores, loopback")).unwrap(),
        "The paper's machine: two 450 MHz Pentium II; this one: 2 cores, loopback."
    );
    assert_eq!(context(None, None), None);
    // Clients the server left unanswered all window are named: held, not served.
    let starving = Table {
        points: vec![
            set(usage(point("pool", 1, 1, 100.0), 50.0, 40.0, 0.0), "starved", 620.0),
            usage(point("event", 1, 1, 200.0), 20.0, 30.0, 0.0),
        ],
    };
    let v = claim("throughput(server=event) >= throughput(server=pool)").judge(&starving);
    assert_eq!(
        v.points[0].reason,
        "event: nothing saturated, server CPU 20 %; pool: nothing saturated, server CPU 50 %; 620 clients \
         unanswered through the whole window (starved)"
    );
}

#[test]
fn small_ratios_keep_two_significant_digits() {
    assert_eq!(figure(1.234), "1.23");
    assert_eq!(figure(0.5), "0.50");
    assert_eq!(figure(0.0011), "0.0011");
    assert_eq!(figure(0.05), "0.050");
    assert_eq!(figure(f64::NAN), "—");
    let p = PointVerdict {
        at: "clients=1".into(),
        left: 129.0,
        right: 121648.0,
        lo: 0.001,
        mid: 0.0011,
        hi: 0.0012,
        repeats: 3,
        word: HOLDS,
        reason: String::new(),
        usage: Vec::new(),
    };
    assert_eq!(p.ratio(1.0), "0.0011× (0.0010–0.0012)");
    assert_eq!(p.ratio(2.0), "0.0022× (0.0020–0.0024)", "the factor taken out");
    assert_eq!(
        PointVerdict { lo: 0.0011, hi: 0.0011, ..p.clone() }.ratio(1.0),
        "0.0011×",
        "one repeat: a point"
    );
    assert_eq!(PointVerdict { mid: f64::NAN, ..p }.ratio(1.0), "—");
}

#[test]
fn bad_claims_say_why() {
    let e = |expr: &str| format!("{:#}", Claim::parse(expr, SERVERS).unwrap_err());
    assert!(e("throughput(server=pool)").contains("no comparison"));
    assert!(e("speed(server=pool) > 1").contains("\"speed\" is not a metric"));
    assert!(e("throughput(server=nginx) > 1").contains("no server \"nginx\""));
    assert!(e("throughput(pool) > 1").contains("want throughput(server=NAME"));
    assert!(e("throughput(server=pool, size=1) > 1").contains("\"size\" is neither `server` nor an axis"));
    assert!(e("1 > 2").contains("compares two numbers"));
    assert!(e("x * throughput(server=pool) > 1").contains("is not a number"));
}

/// A server whose workers each hold a connection for its whole life
/// (prefork, Apache's prefork and worker MPMs) and has fewer of them than
/// the point's clients is limited by its own slots, whatever its CPU —
/// paper 003's 1.3 at 500 users: 256 processes, the CPU half idle.
#[test]
fn a_server_short_of_connection_slots_is_named_as_its_own_limit() {
    let spec = crate::spec::Spec::parse(
        "name = \"x\"\ndescription = \"d\"\n[sweep]\nclients = [50, 500]\n\
         [[server]]\nname = \"pool\"\nmodel = \"prefork\"\n[[server]]\nname = \"event\"\nmodel = \"event\"\n",
        "x.toml",
    )
    .unwrap();
    assert_eq!(spec.servers[0].connection_slots(), Some(crate::spec::MODUS_MAX_CLIENTS));
    assert_eq!(spec.servers[1].connection_slots(), None, "an event loop's connections hold no worker");
    let cpu = |p: Point, pct: f64| {
        set(set(set(p, "server_cpu_pct", pct), "load_cpu_pct", 30.0), "other_cpu_pct", 1.0)
    };
    let table = Table {
        points: vec![
            cpu(point("pool", 50, 1, 100.0), 40.0),
            cpu(point("event", 50, 1, 100.0), 40.0),
            cpu(point("pool", 500, 1, 100.0), 45.0),
            cpu(point("event", 500, 1, 300.0), 60.0),
        ],
    };
    let c = claim("throughput(server=pool) >= throughput(server=event)");
    let v = c.judge_in(&table, &|s| spec.slots_of(s));
    assert_eq!(
        v.points[0].reason,
        "pool: nothing saturated, server CPU 40 %; event: nothing saturated, server CPU 40 %"
    );
    assert_eq!(
        v.points[1].reason,
        "pool: its own 256 connection slots (500 clients) saturated; event: nothing saturated, server CPU 60 %"
    );
    assert!(
        v.reason.contains(
            "Limits at clients=500: pool — its own connection slots (256 for 500 clients: the rest wait to be accepted); event"
        ),
        "{}",
        v.reason
    );
    assert!(!c.judge(&table).reason.contains("slots"), "without the spec, nothing is assumed");
}

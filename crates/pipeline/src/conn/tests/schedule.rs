//! SRPT on the outgoing link: the socket's priority follows the class of a
//! response's remaining bytes as it goes out, and a response kept waiting
//! too long goes first.

use super::*;
use crate::schedule::{Schedule, Srpt};
use transport::Wire;

const GET_BIG: &[u8] = b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n";

fn srpt(cutoffs: &[u64], quantum: u64) -> Harness {
    let srpt = Srpt { cutoffs: cutoffs.to_vec(), quantum, ..Srpt::default() };
    Harness::with(Settings { schedule: Schedule::Srpt(srpt), ..Settings::default() }, Mode::Inline)
}

#[test]
fn fifo_leaves_the_socket_alone() {
    let mut h = Harness::new();
    h.send(GET_BIG);
    assert_eq!(h.response().body.len(), BIG.len());
    assert!(h.wire.priorities.borrow().is_empty());
    assert_eq!(h.wire.unsent_limit.get(), None);
}

#[test]
fn the_priority_rises_as_the_response_goes_out() {
    let mut h = srpt(&[10_000, 50_000], 10_000);
    h.send(GET_BIG);
    let written = h.wire.take_written();
    assert_eq!(parse_responses(&written)[0].body.len(), BIG.len(), "the whole response, in quanta");
    // Class 2 while more than 50,000 bytes are left, 1 down to 10,000, then 0,
    // each change made at the first quantum boundary past its cutoff.
    assert_eq!(*h.wire.priorities.borrow(), [0x10003, 0x10002, 0x10001]);
    let total = written.len();
    let left: Vec<usize> = h.wire.priority_at.borrow().iter().map(|at| total - at).collect();
    assert_eq!(left[0], total);
    assert!(left[1] <= 50_000 && left[1] + 10_000 > 50_000, "{left:?}");
    assert!(left[2] <= 10_000 && left[2] + 10_000 > 10_000, "{left:?}");
    assert_eq!(h.wire.unsent_limit.get(), Some(Srpt::UNSENT_LIMIT));
}

#[test]
fn each_response_on_a_connection_gets_its_own_class() {
    let mut h = srpt(&[10_000, 50_000], 10_000);
    h.send(GET);
    h.send(GET_BIG);
    assert_eq!(h.responses().len(), 2);
    // The small one at class 0; the large one starts again at class 2.
    assert_eq!(*h.wire.priorities.borrow(), [0x10001, 0x10003, 0x10002, 0x10001]);
}

/// `--srpt-unsent-limit 0` leaves the kernel's unsent limit alone.
#[test]
fn an_unsent_limit_of_zero_is_not_set() {
    let srpt = Srpt { cutoffs: vec![10_000], unsent_limit: 0, ..Srpt::default() };
    let mut h =
        Harness::with(Settings { schedule: Schedule::Srpt(srpt), ..Settings::default() }, Mode::Inline);
    h.send(GET_BIG);
    assert_eq!(h.response().body.len(), BIG.len());
    assert!(!h.wire.priorities.borrow().is_empty(), "priorities are still set");
    assert_eq!(h.wire.unsent_limit.get(), None);
}

/// `--srpt-max-wait`: a large response that has been writing that long is
/// served at the top class, however much is left.
#[test]
fn a_response_that_waited_too_long_is_served_first() {
    let mut h = srpt(&[10_000, 50_000], 10_000);
    h.wire.send_room(20_000);
    let Want::Write(_) = h.send(GET_BIG) else { panic!("the send buffer is full") };
    assert_eq!(*h.wire.priorities.borrow(), [0x10003]);
    h.now += Srpt::MAX_WAIT;
    h.wire.send_room(10_000);
    h.drive();
    assert_eq!(*h.wire.priorities.borrow(), [0x10003, 0x10001], "promoted with 70 KB left");
}

/// In an event loop a large response yields after each quantum, so the
/// loop can serve the connections with less left first.
#[test]
fn a_yielding_connection_stops_after_each_quantum() {
    let mut h = srpt(&[10_000, 50_000], 30_000);
    h.conn.set_yielding();
    let (order, max_wait) = (Srpt::default(), Srpt::MAX_WAIT);
    assert_eq!(h.conn.remaining(&order, h.now), 0, "nothing to write yet");
    assert_eq!(h.send(GET_BIG), Want::Again);
    let mut left = vec![h.conn.remaining(&order, h.now)];
    while let Want::Again = h.drive() {
        left.push(h.conn.remaining(&order, h.now));
    }
    assert_eq!(h.conn.remaining(&order, h.now), 0, "done");
    assert_eq!(left.len(), 3, "quanta of 30,000 bytes: {left:?}");
    assert!(left.windows(2).all(|w| w[0] - w[1] == 30_000), "{left:?}");
    assert_eq!(h.response().body.len(), BIG.len());
    // A response that has been writing past the bound counts as nothing left.
    let mut h = srpt(&[10_000, 50_000], 30_000);
    h.conn.set_yielding();
    h.send(GET_BIG);
    assert!(h.conn.remaining(&order, h.now) > 0);
    assert_eq!(h.conn.remaining(&order, h.now + max_wait), 0);
}

/// Without SRPT nothing yields: the default write path is unchanged.
#[test]
fn fifo_never_yields() {
    let mut h = Harness::new();
    h.conn.set_yielding();
    assert!(matches!(h.send(GET_BIG), Want::Read(_)));
    assert_eq!(h.response().body.len(), BIG.len());
}

/// The same on a real socket: what the kernel holds once a large response
/// is out is class 0's priority, and the unsent limit is set.
#[test]
fn a_real_socket_ends_at_the_top_class() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, peer) = listener.accept().unwrap();
    server.set_nonblocking(true).unwrap();
    let srpt = Srpt { cutoffs: vec![10_000, 50_000], quantum: 10_000, ..Srpt::default() };
    let settings = Settings { schedule: Schedule::Srpt(srpt), ..Settings::default() };
    let h = Harness::with(settings, Mode::Inline);
    let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &h.p, Mode::Inline);
    // A quantum per drive, so the priority can be read between them.
    conn.set_yielding();
    client.write_all(GET_BIG).unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while got.len() < BIG.len() {
            let n = client.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    let sock = socket2::SockRef::from(&server);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..10_000 {
        let want = conn.drive(&server, &h.p, false);
        seen.insert(sock.priority().unwrap());
        if conn.served() == 1 {
            break;
        }
        assert!(matches!(want, Want::Write(_) | Want::Read(_) | Want::Again), "{want:?}");
        std::thread::yield_now();
    }
    assert_eq!(conn.served(), 1);
    assert!(reader.join().unwrap().len() >= BIG.len());
    assert_eq!(sock.priority().unwrap(), 0x10001, "class 0 at the end");
    assert!(seen.len() >= 2, "the priority changed on the way: {seen:?}");
    assert_eq!(sock.tcp_notsent_lowat().unwrap(), Srpt::UNSENT_LIMIT);
}

/// What `srpt-group` groups a turn by: the file a response is sending —
/// one document for every request of one file, another for another file,
/// nothing for a reply without a file's bytes (HEAD, an error) or once it
/// is written.
#[test]
fn a_response_names_the_document_it_sends() {
    let sending = |request: &[u8]| {
        let mut h = srpt(&[10_000, 50_000], 30_000);
        h.conn.set_yielding();
        h.send(request);
        let document = h.conn.document();
        while let Want::Again = h.drive() {}
        assert_eq!(h.conn.document(), None, "written");
        document
    };
    let big = sending(GET_BIG).expect("a GET of a file names it");
    assert_eq!(sending(GET_BIG), Some(big), "every request of one file: one document");
    assert_eq!(sending(b"GET /big.bin?v=2 HTTP/1.1\r\nHost: x\r\n\r\n"), Some(big), "by file, not by target");
    assert_eq!(sending(b"HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n"), None, "no body");
    assert_eq!(sending(b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n"), None, "an error page");
    // A small file is written in one drive; its document is another.
    let mut h = srpt(&[10_000, 50_000], 30_000);
    h.wire.send_room(10);
    h.send(GET);
    let small = h.conn.document().expect("still writing");
    assert_ne!(small, big);
}

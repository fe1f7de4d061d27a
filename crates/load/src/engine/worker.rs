//! One thread's loop: its timers, its users (closed loop) or arrivals (open
//! loop), and the record of every request.

use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll};

use crate::dist::{self, Rng};
use crate::http::{Response, ResponseParser};
use crate::stats::{ErrorKind, LoopUsage, Row, Stats};
use crate::target::{Chooser, StreamRef};

use super::conn::{Conn, Req};
use super::*;

pub(super) const RBUF: usize = 64 * 1024;

pub(super) struct Worker<'a> {
    pub(super) cfg: &'a Config,
    pub(super) sh: Arc<Shared>,
    pub(super) poll: Poll,
    pub(super) conns: Vec<Conn>,
    pub(super) st: Stats,
    pub(super) rng: Rng,
    pub(super) rr: usize,
    /// Timers: (when, connection).
    pub(super) timers: BinaryHeap<std::cmp::Reverse<(Instant, usize)>>,
    /// Open loop.
    pub(super) open: bool,
    /// `--stream-times`: this thread's next stream entry, and the stride
    /// (the threads take turns).
    pub(super) stream_next: usize,
    pub(super) stream_step: usize,
    /// When the arrival schedule starts (the loop's start).
    pub(super) origin: Instant,
    pub(super) gap_s: f64,
    pub(super) next_arrival: Instant,
    pub(super) arrivals_done: bool,
    pub(super) pending: VecDeque<(Instant, u32, bool)>,
    pub(super) free: Vec<usize>,
    /// Source address rotation for `--close`.
    pub(super) spread: bool,
    pub(super) src_next: u32,
    pub(super) src_base: u8,
    pub(super) checksums: Vec<Option<u64>>,
    /// `--workload`, closed loop: each connection's requests (its users')
    /// and how far it got.
    pub(super) scripts: Vec<Vec<StreamRef>>,
    pub(super) script_pos: Vec<usize>,
    /// The index in the run of this thread's first connection.
    pub(super) first_conn: usize,
    pub(super) last_timeout_scan: Instant,
    pub(super) tick: Duration,
    /// epoll waits in whole milliseconds; a timerfd wakes the loop on time
    /// for arrivals and think-time ends (else sends would lag ~0.5 ms).
    pub(super) timerfd: std::os::fd::OwnedFd,
    pub(super) armed: Option<Instant>,
}

impl<'a> Worker<'a> {
    pub(super) fn new(
        cfg: &'a Config,
        sh: Arc<Shared>,
        t: usize,
        threads: usize,
        range: std::ops::Range<usize>,
    ) -> io::Result<Worker<'a>> {
        let now = Instant::now();
        let nconns = range.len();
        let mut scripts = vec![Vec::new(); nconns];
        if let (Chooser::Stream(seq), false) = (&cfg.workload.chooser, cfg.open_loop()) {
            // A SURGE user's pages, and the OFF times between them, stay on
            // one connection, as a browser's would.
            for r in seq {
                let g = r.user as usize % cfg.connections;
                if range.contains(&g) {
                    scripts[g - range.start].push(*r);
                }
            }
        }
        let conns = (0..nconns)
            .map(|_| Conn {
                sock: None,
                connected: false,
                since: now,
                wbuf: Vec::new(),
                wpos: 0,
                rbuf: vec![0; RBUF],
                rpos: 0,
                rlen: 0,
                inflight: VecDeque::new(),
                parser: ResponseParser::new(cfg.checksum),
                served: 0,
                done: false,
                listed: false,
                waiting: false,
                backing_off: false,
                deferred: None,
                generation: 0,
                tls: None,
                handshaken: false,
            })
            .collect();
        let thread_rate = cfg.rate.map(|r| r * nconns as f64 / cfg.connections.max(1) as f64);
        let mut rng = dist::rng(cfg.seed, t as u64);
        let gap_s = thread_rate.map_or(0.0, |r| 1.0 / r);
        // Stagger the threads' first arrivals so constant schedules interleave.
        let first = match cfg.arrivals {
            Arrivals::Constant => gap_s * t as f64 / threads as f64,
            Arrivals::Poisson => -gap_s * dist::uniform(&mut rng).ln(),
        };
        let mut first = sh.start + Duration::from_secs_f64(first);
        let mut arrivals_done = nconns == 0;
        if cfg.stream_times.is_some() {
            match stream_time(cfg, sh.start, t) {
                Some(at) => first = at,
                None => arrivals_done = true,
            }
        }
        Ok(Worker {
            cfg,
            next_arrival: first,
            stream_next: t,
            stream_step: threads,
            origin: sh.start,
            sh,
            poll: Poll::new()?,
            conns,
            st: Stats::new(cfg.workload.classes.len()),
            rng,
            rr: t,
            timers: BinaryHeap::new(),
            open: cfg.open_loop(),
            gap_s,
            arrivals_done,
            pending: VecDeque::new(),
            free: Vec::new(),
            spread: cfg.spread_source,
            src_next: 0,
            src_base: 1 + (t % 250) as u8,
            checksums: cfg.workload.targets.iter().map(|t| t.expect_sum).collect(),
            script_pos: vec![0; nconns],
            scripts,
            first_conn: range.start,
            last_timeout_scan: now,
            armed: None,
            timerfd: rustix::time::timerfd_create(
                rustix::time::TimerfdClockId::Monotonic,
                rustix::time::TimerfdFlags::NONBLOCK | rustix::time::TimerfdFlags::CLOEXEC,
            )?,
            tick: (cfg.timeout / 20).clamp(Duration::from_millis(1), Duration::from_millis(50)),
        })
    }

    pub(super) fn run(mut self) -> io::Result<Stats> {
        let mut events = Events::with_capacity(1024);
        {
            use std::os::fd::AsRawFd;
            let raw = self.timerfd.as_raw_fd();
            self.poll.registry().register(&mut mio::unix::SourceFd(&raw), TIMER_TOKEN, Interest::READABLE)?;
        }
        let now = Instant::now();
        // The schedule starts when this loop does: arrivals due while the
        // thread was being created would otherwise count as its lateness.
        let shift = now.saturating_duration_since(self.sh.start);
        self.next_arrival += shift;
        self.origin += shift;
        let cpu_before = thread_cpu();
        let mut waiting = Duration::ZERO;
        for ci in 0..self.conns.len() {
            if self.open {
                if !self.cfg.close {
                    self.connect(ci, now);
                }
                self.make_free(ci);
            } else {
                self.user_next(ci, now);
            }
        }
        loop {
            let now = Instant::now();
            if self.sh.stop.load(Ordering::Relaxed) || self.sh.end.is_some_and(|e| now >= e) {
                self.abandon();
                break;
            }
            self.fire_timers(now);
            if self.open {
                self.arrive(now);
                self.dispatch(now);
            }
            if now.duration_since(self.last_timeout_scan) >= self.tick {
                self.last_timeout_scan = now;
                self.scan_timeouts(now);
            }
            if self.finished() {
                break;
            }
            let mut wake = now + self.tick;
            let mut precise = None;
            if let Some(std::cmp::Reverse((t, _))) = self.timers.peek() {
                precise = Some(*t);
            }
            if self.open && !self.arrivals_done {
                precise = Some(precise.map_or(self.next_arrival, |p: Instant| p.min(self.next_arrival)));
            }
            if let Some(e) = self.sh.end {
                wake = wake.min(e);
            }
            if let Some(p) = precise.filter(|&p| p < wake) {
                wake = p;
                self.arm(p, now)?;
            }
            // epoll waits in whole milliseconds: round up (the timerfd,
            // when armed, wakes us earlier), never spin.
            let timeout = wake.saturating_duration_since(now);
            let timeout = Duration::from_millis(timeout.as_micros().div_ceil(1000) as u64);
            let before = Instant::now();
            let polled = self.poll.poll(&mut events, Some(timeout));
            waiting += before.elapsed();
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for ev in events.iter() {
                if ev.token() == TIMER_TOKEN {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&self.timerfd, &mut b);
                    self.armed = None;
                    continue;
                }
                let ci = ev.token().0;
                if ci >= self.conns.len() || self.conns[ci].sock.is_none() {
                    continue;
                }
                if !self.conns[ci].connected && (ev.is_writable() || ev.is_error() || ev.is_write_closed()) {
                    self.check_connected(ci, ev.is_error() || ev.is_write_closed());
                }
                if self.conns[ci].connected && ev.is_writable() {
                    self.flush(ci);
                }
                if self.conns[ci].connected && (ev.is_readable() || ev.is_read_closed() || ev.is_error()) {
                    self.read(ci, ev.is_read_closed() || ev.is_error());
                }
            }
        }
        let wall = now.elapsed().as_secs_f64().max(1e-9);
        self.st.loops.push(LoopUsage {
            busy: (1.0 - waiting.as_secs_f64() / wall).clamp(0.0, 1.0),
            cpu: (thread_cpu() - cpu_before).as_secs_f64() / wall,
        });
        Ok(self.st)
    }

    /// Arms the timerfd for `at` (relative to `now`), unless already armed
    /// for it.
    pub(super) fn arm(&mut self, at: Instant, now: Instant) -> io::Result<()> {
        if self.armed == Some(at) {
            return Ok(());
        }
        let d = at.saturating_duration_since(now).max(Duration::from_micros(1));
        let spec = rustix::time::Itimerspec {
            it_interval: rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: rustix::time::Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ },
        };
        rustix::time::timerfd_settime(&self.timerfd, rustix::time::TimerfdTimerFlags::empty(), &spec)?;
        self.armed = Some(at);
        Ok(())
    }

    pub(super) fn finished(&self) -> bool {
        let idle = self.conns.iter().all(|c| c.inflight.is_empty());
        if self.open {
            self.arrivals_done && self.pending.is_empty() && idle
        } else {
            idle && self.conns.iter().all(|c| c.done)
        }
    }

    /// Takes a request ticket; `None` when `-n` is used up or time is over.
    pub(super) fn ticket(&mut self, intended: Instant) -> Option<bool> {
        if self.sh.end.is_some_and(|e| intended >= e) {
            // A user whose next request falls past the end (its think time
            // outlasts the run) is done, but the run still lasts its time.
            self.sh.past_end.store(true, Ordering::Relaxed);
            return None;
        }
        let measured = intended >= self.sh.measure_start;
        if measured && self.cfg.requests.is_some() {
            self.sh.tickets.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| t.checked_sub(1)).ok()?;
        }
        Some(measured)
    }

    /// The next target for connection `ci` (closed loop) or for the next
    /// arrival (open loop, `ci` None), and the think time the workload asks
    /// before it, and who sends it (a replayed stream's user in the closed
    /// loop, else the connection); `None` when a replayed stream has ended.
    pub(super) fn choose(&mut self, ci: Option<usize>) -> Option<(u32, u64, u32)> {
        let n = self.cfg.workload.targets.len();
        let conn = ci.map_or(0, |ci| (self.first_conn + ci) as u32);
        match &self.cfg.workload.chooser {
            Chooser::RoundRobin => {
                self.rr = (self.rr + 1) % n;
                Some((self.rr as u32, 0, conn))
            }
            Chooser::Weighted(cum) => {
                let u = dist::uniform(&mut self.rng);
                Some(((cum.partition_point(|&c| c < u)).min(n - 1) as u32, 0, conn))
            }
            Chooser::Stream(seq) => {
                let (list, i) = match ci {
                    Some(ci) => {
                        let i = self.script_pos[ci];
                        self.script_pos[ci] += 1;
                        (&self.scripts[ci], i)
                    }
                    None => (seq, self.sh.cursor.fetch_add(1, Ordering::Relaxed)),
                };
                if list.is_empty() || (i >= list.len() && !self.cfg.repeat_stream) {
                    return None;
                }
                let r = list[i % list.len()];
                Some((r.target, r.off_us, if ci.is_some() { r.user } else { conn }))
            }
        }
    }

    // ---- closed loop ------------------------------------------------------

    /// The user on `ci` is ready: think, or send (up to the pipeline depth).
    pub(super) fn user_next(&mut self, ci: usize, now: Instant) {
        while !self.conns[ci].done
            && !self.conns[ci].waiting
            && self.conns[ci].inflight.len() < self.cfg.pipeline
        {
            let Some((target, stream_off, user)) = self.choose(Some(ci)) else {
                self.conns[ci].done = true;
                if self.conns[ci].inflight.is_empty() {
                    self.close(ci);
                }
                return;
            };
            let mut think = self.cfg.think.map(|d| d.sample(&mut self.rng)).unwrap_or_default();
            if self.cfg.stream_think {
                think += Duration::from_micros(stream_off);
            }
            if !think.is_zero() && !self.conns[ci].inflight.is_empty() {
                // Thinking users wait for their previous answer first; the
                // entry is chosen again then, so a replayed stream loses none.
                if let Chooser::Stream(_) = self.cfg.workload.chooser {
                    self.script_pos[ci] -= 1;
                }
                return;
            }
            let intended = now + think;
            if !think.is_zero() {
                self.note_think(now, intended);
            }
            let Some(measured) = self.ticket(intended) else {
                self.conns[ci].done = true;
                if self.conns[ci].inflight.is_empty() {
                    self.close(ci);
                }
                return;
            };
            let req = Req { intended, actual: now, first_byte: None, target, measured, retried: false, user };
            if think.is_zero() {
                self.issue(ci, req, now);
            } else {
                // Sent when the timer fires; the ticket is already taken.
                self.conns[ci].waiting = true;
                self.conns[ci].deferred = Some(req);
                self.timers.push(std::cmp::Reverse((intended, ci)));
                return;
            }
        }
    }

    /// A user thinks from `from` to `to`: the part inside the measured
    /// window counts (a think begun before it, or running on past its end
    /// — SURGE's OFF times run to seconds — counts for its time inside),
    /// so Little's law over the window sees the users who were thinking
    /// through it, not only those whose think ended in it.
    pub(super) fn note_think(&mut self, from: Instant, to: Instant) {
        let from = from.max(self.sh.measure_start);
        let to = self.sh.end.map_or(to, |e| to.min(e));
        if to > from {
            self.st.think_us_sum += us_between(from, to);
        }
    }

    pub(super) fn fire_timers(&mut self, now: Instant) {
        while let Some(&std::cmp::Reverse((t, ci))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            self.conns[ci].waiting = false;
            if !std::mem::take(&mut self.conns[ci].backing_off) {
                self.note_lateness(now, t);
            }
            if self.open {
                self.make_free(ci);
            } else if let Some(req) = self.conns[ci].deferred.take() {
                self.issue(ci, Req { actual: now, ..req }, now);
                self.user_next(ci, now);
            } else {
                self.user_next(ci, now);
            }
        }
    }

    /// The loop sleeps on a timerfd set for the next arrival or think-time
    /// end, whatever the connections are doing, so noticing one late is
    /// the generator's own delay (busy or starved of CPU), never the
    /// server's: count it even when no connection is free.
    pub(super) fn note_lateness(&mut self, now: Instant, due: Instant) {
        let late = now.saturating_duration_since(due);
        if late > self.cfg.lag_threshold {
            self.st.generator_late += 1;
            self.st.generator_max_lag_us = self.st.generator_max_lag_us.max(late.as_micros() as u64);
        }
    }

    // ---- open loop --------------------------------------------------------

    pub(super) fn arrive(&mut self, now: Instant) {
        while !self.arrivals_done && self.next_arrival <= now {
            let intended = self.next_arrival;
            if intended >= self.sh.measure_start {
                self.note_lateness(now, intended);
            }
            let mut timed_target = None;
            if let (Some(_), Chooser::Stream(seq)) = (self.cfg.stream_times, &self.cfg.workload.chooser) {
                timed_target = Some(seq[self.stream_next].target);
                self.stream_next += self.stream_step;
                match stream_time(self.cfg, self.origin, self.stream_next) {
                    Some(at) => self.next_arrival = at,
                    // This one is the thread's last.
                    None => self.arrivals_done = true,
                }
            } else {
                let gap = match self.cfg.arrivals {
                    Arrivals::Constant => self.gap_s,
                    Arrivals::Poisson => -self.gap_s * dist::uniform(&mut self.rng).ln(),
                };
                self.next_arrival += Duration::from_secs_f64(gap);
            }
            let Some(measured) = self.ticket(intended) else {
                self.arrivals_done = true;
                break;
            };
            if self.free.is_empty() && measured {
                self.st.queued += 1;
            }
            if self.pending.len() >= self.cfg.max_queue {
                if measured {
                    // Never sent: an error of the run, not a missing sample.
                    self.st.dropped += 1;
                    self.st.error(ErrorKind::Dropped);
                    let ms = self.sh.measure_start;
                    self.st.second(us_between(ms, intended)).errors += 1;
                    self.sh.progress.errors.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let Some(target) = timed_target.or_else(|| self.choose(None).map(|c| c.0)) else {
                self.arrivals_done = true;
                break;
            };
            self.pending.push_back((intended, target, measured));
        }
    }

    pub(super) fn make_free(&mut self, ci: usize) {
        let c = &mut self.conns[ci];
        if !c.listed && !c.waiting && c.inflight.len() < self.cfg.pipeline {
            c.listed = true;
            self.free.push(ci);
        }
    }

    pub(super) fn dispatch(&mut self, now: Instant) {
        while !self.pending.is_empty() {
            let Some(ci) = self.free.pop() else { break };
            self.conns[ci].listed = false;
            if self.conns[ci].waiting || self.conns[ci].inflight.len() >= self.cfg.pipeline {
                continue;
            }
            let (intended, target, measured) = self.pending.pop_front().expect("non-empty");
            let user = (self.first_conn + ci) as u32;
            let req = Req { intended, actual: now, first_byte: None, target, measured, retried: false, user };
            self.issue(ci, req, now);
            self.make_free(ci);
        }
    }

    /// The run ended: whatever is still in flight or queued is unfinished.
    pub(super) fn abandon(&mut self) {
        let mut n = self.pending.iter().filter(|p| p.2).count() as u64;
        let end = self.sh.end.unwrap_or_else(Instant::now).min(Instant::now());
        let mut waited = Vec::new();
        for c in &self.conns {
            n += c.inflight.iter().filter(|r| r.measured).count() as u64;
            waited.extend(c.inflight.iter().map(|r| (r.intended, r.actual)));
        }
        self.st.unfinished += n;
        // Sent and never answered: waiting for the server when the run
        // ended, those sent before the window for all of it. Their wait so
        // far joins the latency (a lower bound of what they will wait):
        // a client the server never answers is not left out of the
        // response time, as paper 001's clients waiting on MaxClients were
        // when only answers were timed.
        for (intended, sent) in waited {
            self.st.waiting_at_end += 1;
            if sent < self.sh.measure_start {
                self.st.starved += 1;
            }
            self.note_outstanding(sent, end);
            let _ = self.st.latency.record(us_between(intended, end).max(1));
        }
    }

    /// A request waited for its answer from `sent` to `until`: the part
    /// inside the measured window counts toward the requests outstanding.
    pub(super) fn note_outstanding(&mut self, sent: Instant, until: Instant) {
        let from = sent.max(self.sh.measure_start);
        let to = self.sh.end.map_or(until, |e| until.min(e));
        if to > from {
            self.st.outstanding_us_sum += us_between(from, to);
        }
    }

    /// Records the outcome of one request.
    pub(super) fn complete(&mut self, req: Req, result: Result<Response, ErrorKind>, now: Instant) {
        // Sent in the warm-up or not, its wait inside the window counts.
        self.note_outstanding(req.actual, now);
        let ms = self.sh.measure_start;
        // A timed run counts what completes inside its window, whenever it
        // was sent (as wrk does): counting only the requests also sent in
        // it under-reads throughput by about the response time over the
        // window — 20 % for a 0.6 s CGI answer in a 3 s point. With `-n`
        // the requests sent in the window are the ones counted.
        let counted = req.measured || (self.cfg.requests.is_none() && now >= ms);
        if !counted {
            self.st.warmup_requests += 1;
            return;
        }
        let target = &self.cfg.workload.targets[req.target as usize];
        let mut error = None;
        let (status, bytes) = match result {
            Ok(r) => {
                if r.status >= 500 {
                    error = Some(ErrorKind::Status5xx);
                } else if r.status >= 400 {
                    error = Some(ErrorKind::Status4xx);
                } else if target.expect_len.is_some_and(|l| l != r.body_bytes) && r.status == 200 {
                    error = Some(ErrorKind::Size);
                } else if let Some(sum) = r.checksum.filter(|_| r.status == 200) {
                    // Against the file on disk (--workload) or the first body.
                    let want = self.checksums[req.target as usize].get_or_insert(sum);
                    if *want != sum {
                        error = Some(ErrorKind::Checksum);
                    }
                }
                (r.status, r.wire_bytes)
            }
            Err(kind) => {
                error = Some(kind);
                (0, 0)
            }
        };
        let latency = us_between(req.intended, now).max(1);
        let end_us = us_between(ms, now);
        self.st.last_end_us = self.st.last_end_us.max(end_us);
        let sec = self.st.second(end_us);
        sec.bytes += bytes;
        if status != 0 {
            sec.requests += 1;
            let _ = sec.latency.record(latency);
        }
        if error.is_some() {
            sec.errors += 1;
        }
        let class = &mut self.st.classes[target.class];
        class.bytes += bytes;
        if error.is_some() {
            class.errors += 1;
        }
        if status != 0 {
            let _ = class.latency.record(latency);
            self.st.requests += 1;
            self.st.bytes += bytes;
            if let Ok(r) = result {
                self.st.body_bytes += r.body_bytes;
            }
            *self.st.status.entry(status).or_default() += 1;
            let _ = self.st.latency.record(latency);
            if (200..300).contains(&status) {
                let _ = self.st.latency_2xx.record(latency);
            }
            let _ = self.st.service.record(us_between(req.actual, now).max(1));
            if let Some(fb) = req.first_byte {
                let _ = self.st.ttfb.record(us_between(req.actual, fb).max(1));
            }
            self.sh.progress.requests.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(kind) = error {
            self.st.error(kind);
            self.sh.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
        if self.cfg.timeline {
            let start = self.sh.start;
            self.st.timeline.push(Row {
                intended_us: us_between(start, req.intended),
                actual_us: us_between(start, req.actual),
                first_byte_us: req.first_byte.map_or(0, |f| us_between(start, f)),
                end_us: us_between(start, now),
                status,
                bytes,
                target: req.target,
                error,
            });
        }
    }
}

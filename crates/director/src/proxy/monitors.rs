//! Monitor connections (`modus monitor`) and their reports.

use std::time::{Duration, Instant};

use transport::accept::{self, Failed};
use transport::poller::{Interest, Trigger};

use super::*;
use crate::backend::MonitorState;
use crate::monitor::{self, MAX_LINE};

impl Director {
    pub(super) fn accept_monitors(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let Some(l) = &self.monitor_listener else { return };
            let (stream, peer) = match accept::accept(l, accept::Mode::NonBlocking) {
                Ok(pair) => pair,
                Err((Failed::Retry, _)) => continue,
                Err((Failed::Empty, _)) => return,
                // Out of descriptors or memory (or the listener gone, which
                // only the stop does, having taken it out first): the tick
                // puts it back rather than the loop spinning on it.
                Err((Failed::Pause | Failed::Gone, e)) => {
                    self.pause_listener(MONITOR_LISTENER, &e);
                    return;
                }
            };
            let monitor = MonConn {
                stream,
                peer: peer.ip(),
                io: Buffered::eager(),
                backends: None,
                interval: Duration::from_millis(200),
            };
            let Some(token) = self.monitors.insert(monitor) else { continue };
            let Some(m) = self.monitors.get(token) else { continue };
            if self.poller.add(&m.stream, token, Interest::READABLE, Trigger::Edge).is_err() {
                self.monitors.remove(token);
                continue;
            }
        }
    }

    pub(super) fn monitor_event(&mut self, token: u64) {
        let mut close = false;
        let mut changed = false;
        loop {
            let Some(m) = self.monitors.get_mut(token) else { return };
            match m.io.fill(&m.stream, 4 * MAX_LINE) {
                Io::Data => {}
                Io::Blocked if m.io.inbuf.len() < 4 * MAX_LINE => break,
                _ => {
                    close = true;
                    break;
                }
            }
            while let Some(lf) = m.io.inbuf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = m.io.inbuf.drain(..=lf).collect();
                let Ok(line) = std::str::from_utf8(&line) else {
                    close = true;
                    break;
                };
                let line = line.trim_end();
                match &m.backends {
                    None => match monitor::parse_hello(line) {
                        Some(hello) => {
                            let list: Vec<usize> = self
                                .backends
                                .iter()
                                .enumerate()
                                .filter(|(_, b)| match &hello.backend {
                                    Some(name) => *name == b.name || name.parse() == Ok(b.addr),
                                    None => b.addr.ip() == m.peer,
                                })
                                .map(|(i, _)| i)
                                .collect();
                            if list.is_empty() {
                                close = true;
                                break;
                            }
                            m.interval = hello.interval;
                            m.backends = Some(list);
                        }
                        None => {
                            close = true;
                            break;
                        }
                    },
                    Some(list) => match monitor::parse_report(line) {
                        Some(report) => {
                            let now = Instant::now();
                            for &b in list {
                                let backend = &mut self.backends[b];
                                let state = if report.overloaded {
                                    MonitorState::Overloaded
                                } else {
                                    MonitorState::Serviceable
                                };
                                changed |= backend.monitor != state;
                                backend.monitor = state;
                                backend.monitor_seen = Some(now);
                                backend.monitor_valid = (m.interval * 3).max(Duration::from_secs(1));
                                backend.monitor_detail = report.detail.clone();
                            }
                        }
                        None => {
                            close = true;
                            break;
                        }
                    },
                }
            }
            if close {
                break;
            }
        }
        if close {
            if let Some(m) = self.monitors.remove(token) {
                for b in m.backends.unwrap_or_default() {
                    self.backends[b].monitor = MonitorState::Unknown;
                    self.backends[b].monitor_seen = None;
                }
                changed = true;
            }
        }
        if changed {
            self.dispatch_queue();
        }
    }
}

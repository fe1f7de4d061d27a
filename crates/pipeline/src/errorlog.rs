//! The error log: timestamped diagnostics, written at once (they are rare).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::accesslog::{clf_time, open_append, LogTarget};

/// Diagnostics for operators: start-up, failures, dropped connections.
#[derive(Debug)]
pub struct ErrorLog {
    target: LogTarget,
    file: Mutex<Option<File>>,
    /// What [`warn_once`](Self::warn_once) let through lately.
    said: Mutex<Said>,
}

/// Lines a client can cause (a 403 per request, say) are repeated at most
/// once per key per [`REPEAT_AFTER`], and at most [`PER_WINDOW`] of them
/// go out per window in all; the next line that may go out says how many
/// were held back. A client cannot flood the log, and an operator still
/// learns of each cause.
#[derive(Debug, Default)]
struct Said {
    /// Keys said in the current window, and when.
    keys: HashMap<String, Instant>,
    window_start: Option<Instant>,
    in_window: u32,
    held_back: u64,
}

/// How long a key stays quiet after it was said.
const REPEAT_AFTER: Duration = Duration::from_secs(60);
/// Most rate-limited lines per window (of [`REPEAT_AFTER`]).
const PER_WINDOW: u32 = 20;

impl ErrorLog {
    /// Opens the log; `LogTarget::Stdout` is taken to mean standard error.
    pub fn open(target: LogTarget) -> io::Result<ErrorLog> {
        let file = match &target {
            LogTarget::File(path) => Some(open_append(path)?),
            _ => None,
        };
        Ok(ErrorLog { target, file: Mutex::new(file), said: Mutex::default() })
    }

    /// Standard error.
    pub fn stderr() -> ErrorLog {
        ErrorLog { target: LogTarget::Stdout, file: Mutex::new(None), said: Mutex::default() }
    }

    /// Logs at level `error`.
    pub fn error(&self, msg: fmt::Arguments<'_>) {
        self.write("error", msg);
    }

    /// Logs at level `warn`, unless `key` was said in the last minute or
    /// the minute's budget of such lines is spent (see [`Said`]): for
    /// what clients can cause at will. Returns whether it was written.
    pub fn warn_once(&self, key: &str, msg: fmt::Arguments<'_>) -> bool {
        self.once_at("warn", key, msg, Instant::now())
    }

    /// [`warn_once`](Self::warn_once) at level `error`: for failures that
    /// repeat as long as their cause lasts (out of descriptors).
    pub fn error_once(&self, key: &str, msg: fmt::Arguments<'_>) -> bool {
        self.once_at("error", key, msg, Instant::now())
    }

    /// Says (once a minute) that accepting failed and pauses
    /// (`transport::accept::Failed::Pause`): every accepting loop, the
    /// director's included, says it in these words.
    pub fn accept_paused(&self, e: &io::Error) {
        self.error_once("accept", format_args!("accept: {e}: {}", transport::accept::PAUSE_HINT));
    }

    #[cfg(test)]
    fn warn_once_at(&self, key: &str, msg: fmt::Arguments<'_>, now: Instant) -> bool {
        self.once_at("warn", key, msg, now)
    }

    fn once_at(&self, level: &str, key: &str, msg: fmt::Arguments<'_>, now: Instant) -> bool {
        let held_back = {
            let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
            if said.window_start.is_none_or(|start| now.duration_since(start) >= REPEAT_AFTER) {
                said.window_start = Some(now);
                said.in_window = 0;
                said.keys.retain(|_, at| now.duration_since(*at) < REPEAT_AFTER);
            }
            let recent = said.keys.get(key).is_some_and(|at| now.duration_since(*at) < REPEAT_AFTER);
            if recent || said.in_window >= PER_WINDOW {
                said.held_back += 1;
                return false;
            }
            said.in_window += 1;
            said.keys.insert(key.to_string(), now);
            std::mem::take(&mut said.held_back)
        };
        if held_back > 0 {
            self.write(level, format_args!("{msg} ({held_back} similar lines held back in the last minute)"));
        } else {
            self.write(level, msg);
        }
        true
    }

    /// Logs at level `warn`.
    pub fn warn(&self, msg: fmt::Arguments<'_>) {
        self.write("warn", msg);
    }

    /// Logs at level `info`.
    pub fn info(&self, msg: fmt::Arguments<'_>) {
        self.write("info", msg);
    }

    /// Reopens the file at its path (log rotation).
    pub fn reopen(&self) -> io::Result<()> {
        if let LogTarget::File(path) = &self.target {
            *self.file.lock().unwrap_or_else(|e| e.into_inner()) = Some(open_append(path)?);
        }
        Ok(())
    }

    fn write(&self, level: &str, msg: fmt::Arguments<'_>) {
        let mut line = Vec::with_capacity(128);
        line.push(b'[');
        clf_time(&mut line, &h1::http_date_now());
        let _ = writeln!(line, "] [{level}] {msg}");
        // One write per line keeps lines whole when threads or processes share the file.
        let _ = match &self.target {
            LogTarget::Off => Ok(()),
            LogTarget::Stdout => io::stderr().lock().write_all(&line),
            LogTarget::File(_) => match self.file.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                Some(file) => file.write_all(&line),
                None => Ok(()),
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_lines_are_held_back_and_counted() {
        let log = ErrorLog::open(LogTarget::Off).unwrap();
        let t0 = Instant::now();
        assert!(log.warn_once_at("/a", format_args!("a"), t0));
        assert!(!log.warn_once_at("/a", format_args!("a"), t0 + Duration::from_secs(59)), "once a minute");
        assert!(log.warn_once_at("/b", format_args!("b"), t0 + Duration::from_secs(1)), "other keys go on");
        assert!(log.warn_once_at("/a", format_args!("a"), t0 + Duration::from_secs(61)), "a minute later");
        assert_eq!(log.said.lock().unwrap().held_back, 0, "the count went out with that line");
        let t1 = t0 + Duration::from_secs(200);
        let said: Vec<bool> =
            (0..30).map(|i| log.warn_once_at(&format!("/k{i}"), format_args!("k"), t1)).collect();
        assert_eq!(said.iter().filter(|s| **s).count(), PER_WINDOW as usize, "a budget per minute");
        assert_eq!(log.said.lock().unwrap().held_back, 10);
    }
}

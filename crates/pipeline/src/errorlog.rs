//! The error log: timestamped diagnostics, written at once (they are rare).

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::sync::Mutex;

use crate::accesslog::{clf_time, open_append, LogTarget};

/// Diagnostics for operators: start-up, failures, dropped connections.
#[derive(Debug)]
pub struct ErrorLog {
    target: LogTarget,
    file: Mutex<Option<File>>,
}

impl ErrorLog {
    /// Opens the log; `LogTarget::Stdout` is taken to mean standard error.
    pub fn open(target: LogTarget) -> io::Result<ErrorLog> {
        let file = match &target {
            LogTarget::File(path) => Some(open_append(path)?),
            _ => None,
        };
        Ok(ErrorLog { target, file: Mutex::new(file) })
    }

    /// Standard error.
    pub fn stderr() -> ErrorLog {
        ErrorLog { target: LogTarget::Stdout, file: Mutex::new(None) }
    }

    /// Logs at level `error`.
    pub fn error(&self, msg: fmt::Arguments<'_>) {
        self.write("error", msg);
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

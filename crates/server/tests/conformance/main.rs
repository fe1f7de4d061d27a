//! Black-box conformance suite: every test here runs once per concurrency
//! model against the real `modus` binary.
//!
//! # Layout
//!
//! Each feature file (`range.rs`, `keepalive.rs`, ...) is written once, as a
//! plain list of `#[test]` functions that start their server with
//! `serve(MODEL, ...)`. The [`models!`] macro below pastes every feature
//! file into a module per model, so the tests are named
//! `conformance::<model>::<feature>::<case>`:
//!
//! ```text
//! cargo test -p modus --test conformance                      # everything
//! cargo test -p modus --test conformance conformance::pool::   # one model
//! cargo test -p modus --test conformance range::suffix         # one case, all models
//! cargo test -p modus conformance::pool::range::suffix         # exact
//! ```
//!
//! **Adding a model** needs nothing here: the suite runs every model of
//! the registry (`models::each_model!`), plain and over TLS
//! (`conformance::<model>::tls::`).
//! **Adding a feature file** is one line in `features!` and one
//! `#[cfg(any())] mod` line (see below).
//!
//! Feature files are pulled in with `include!` (a file can't be a module of
//! several parents), so they must not contain inner attributes or `//!`
//! comments, and start with `use super::MODEL; use crate::common::*;`.
//!
//! Rules every test follows: its own server on `127.0.0.1:0` and its own
//! temporary docroot (tests run in parallel); every read has a 5 s timeout;
//! no assertion on elapsed time (short `--*-timeout` flags only make the
//! timeout tests fast).

mod common;

// Never compiled: these declarations only make `cargo fmt` see (and format)
// the feature files, which are compiled through `include!` in `models!`.
#[cfg(any())]
mod accesslog;
#[cfg(any())]
mod bad_input;
#[cfg(any())]
mod cache;
#[cfg(any())]
mod cgi;
#[cfg(any())]
mod clients;
#[cfg(any())]
mod compress;
#[cfg(any())]
mod conditional;
#[cfg(any())]
mod equivalence;
#[cfg(any())]
mod error_pages;
#[cfg(any())]
mod keepalive;
#[cfg(any())]
mod methods;
#[cfg(any())]
mod range;
#[cfg(any())]
mod shutdown;
#[cfg(any())]
mod slow;
#[cfg(any())]
mod static_files;
#[cfg(any())]
mod timeouts;
#[cfg(any())]
mod traversal;

/// The feature files, as modules of the module it is called in (which
/// holds `MODEL`).
macro_rules! features {
    () => {
        mod accesslog {
            include!("accesslog.rs");
        }
        mod bad_input {
            include!("bad_input.rs");
        }
        mod cache {
            include!("cache.rs");
        }
        mod cgi {
            include!("cgi.rs");
        }
        mod clients {
            include!("clients.rs");
        }
        mod compress {
            include!("compress.rs");
        }
        mod conditional {
            include!("conditional.rs");
        }
        mod equivalence {
            include!("equivalence.rs");
        }
        mod error_pages {
            include!("error_pages.rs");
        }
        mod keepalive {
            include!("keepalive.rs");
        }
        mod methods {
            include!("methods.rs");
        }
        mod range {
            include!("range.rs");
        }
        mod shutdown {
            include!("shutdown.rs");
        }
        mod slow {
            include!("slow.rs");
        }
        mod static_files {
            include!("static_files.rs");
        }
        mod timeouts {
            include!("timeouts.rs");
        }
        mod traversal {
            include!("traversal.rs");
        }
    };
}

/// Every feature file once per `module_name => "model-name"` pair; the
/// name may carry flags (`"event --schedule srpt"`), so one model runs the
/// whole suite under another setting too.
macro_rules! models {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            /// The `--model` value these tests run against.
            const MODEL: &str = $name;
            features!();
        }
    )*};
}

/// Every model of the registry, plain and over HTTPS (one byte stream,
/// one answer, with or without TLS underneath: the testkit's clients speak
/// TLS to a server that announces https) — `<model>::…` and
/// `<model>::tls::…`.
macro_rules! registered {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            /// The `--model` value these tests run against.
            const MODEL: &str = $name;
            features!();

            mod tls {
                /// The `--model` value these tests run against.
                const MODEL: &str = concat!($name, " --tls-self-signed");
                features!();
            }
        }
    )*};
}

mod conformance {
    // Every model: the registry's list (`models::each_model!`).
    models::each_model!(registered);

    models! {
        // SRPT changes the write path (bounded writes, socket priorities):
        // the models whose loops it concerns run everything under it too.
        event_srpt => "event --schedule srpt",
        amped_srpt => "amped --schedule srpt",
        // And same-document grouping, whose misses wait on one another's read.
        amped_srpt_group => "amped --schedule srpt-group",
    }
}

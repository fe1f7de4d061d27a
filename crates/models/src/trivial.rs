//! `trivial` — a model for tests only: one thread accepts a connection and
//! serves it to the end before taking the next. It shows what a model
//! needs — its declaration and a `run` that schedules the shared pipeline —
//! and `registry_tests` registers it with one line.

use std::io;

use pipeline::serve_blocking;
use transport::Wake;

use crate::{Caps, ModelEnv, ModelInfo, Sendfile};

pub(crate) const MODEL: ModelInfo = ModelInfo {
    name: "trivial",
    paper_name: "none",
    summary: "one connection at a time, on the accepting thread (tests only)",
    caps: Caps {
        forks: false,
        event_driven: false,
        staged: false,
        srpt_loop: false,
        sendfile: Sendfile::Always,
        pipeline_on_loop: false,
        holds_connection: false,
    },
    knobs: &[],
    run,
};

fn run(env: ModelEnv) -> io::Result<()> {
    let ModelEnv { listener, pipeline, shutdown, .. } = env;
    while shutdown.wait_readable(&listener, None)? == Wake::Ready {
        let (stream, _) = listener.accept()?;
        serve_blocking(stream, &pipeline, &shutdown);
    }
    Ok(())
}

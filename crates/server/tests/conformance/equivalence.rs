// One answer per byte stream, whatever the model: the corpus in
// tests/corpus/streams.txt (odd requests: methods, versions, targets, Host,
// framing, chunked edge cases, header oddities, pipelined mixes, smuggling
// shapes) is sent to the model, each case on a connection of its own then
// closed for writing; the statuses answered and what the CGI script
// /cgi-bin/seen was given (and /cgi-bin/early, which answers without
// reading it, said) must be exactly tests/corpus/answers.txt, the
// same file for every model. `MODUS_BLESS=1` rewrites it from the model run
// (review the diff: a change there is a change of behaviour).
// (Included once per model.)

use super::MODEL;
use crate::common::*;

const STREAMS: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/streams.txt"));
const ANSWERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/answers.txt");

/// What the script prints: everything of the request a script can see.
const SEEN: &str = "#!/bin/sh\n\
    printf 'Content-Type: text/plain\\n\\n'\n\
    printf 'seen: %s %s path_info=%s query=%s length=%s type=%s host=%s protocol=%s x_a=%s proxy=%s\\n' \
    \"$REQUEST_METHOD\" \"$SCRIPT_NAME\" \"$PATH_INFO\" \"$QUERY_STRING\" \"$CONTENT_LENGTH\" \"$CONTENT_TYPE\" \
    \"$HTTP_HOST\" \"$SERVER_PROTOCOL\" \"$HTTP_X_A\" \"$HTTP_PROXY\"\n\
    printf 'body: '\n\
    head -c \"${CONTENT_LENGTH:-0}\"\n\
    echo\n";

/// A script that answers without reading its input: a server that starts
/// it before the body is whole would relay its answer to a body the client
/// never finished (issue 34, item 9).
const EARLY: &str = "#!/bin/sh\nprintf 'Content-Type: text/plain\\n\\nseen: early\\n'\n";

/// The cases: (name, bytes), decoding `\r \n \t \\ \xHH`.
fn cases() -> Vec<(String, Vec<u8>)> {
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for line in STREAMS.lines().filter(|l| !l.starts_with('#')) {
        if let Some(name) = line.strip_prefix("== ") {
            cases.push((name.to_string(), Vec::new()));
            continue;
        }
        let bytes = &mut cases.last_mut().expect("a case before its bytes").1;
        let mut chars = line.bytes();
        while let Some(b) = chars.next() {
            if b != b'\\' {
                bytes.push(b);
                continue;
            }
            match chars.next() {
                Some(b'r') => bytes.push(b'\r'),
                Some(b'n') => bytes.push(b'\n'),
                Some(b't') => bytes.push(b'\t'),
                Some(b'\\') => bytes.push(b'\\'),
                Some(b'x') => {
                    let hex: Vec<u8> = chars.by_ref().take(2).collect();
                    bytes.push(u8::from_str_radix(std::str::from_utf8(&hex).unwrap(), 16).unwrap());
                }
                other => panic!("bad escape \\{:?} in {line:?}", other.map(char::from)),
            }
        }
    }
    cases
}

/// What a case got: its statuses, and what the script saw each time it ran.
fn answer(srv: &Server, name: &str, bytes: &[u8]) -> String {
    let method = if bytes.starts_with(b"HEAD ") { "HEAD" } else { "GET" };
    let mut c = srv.client();
    // The server may answer and close before it has read everything.
    let _ = c.try_send(bytes);
    if name.ends_with("-held") {
        // Open a moment longer, as a client waiting for its answer is: a
        // server that answers a body it has not whole (issue 34, item 9)
        // says so now; one that waits for the body has nothing to say.
        let tcp = c.stream();
        let _ = tcp.set_read_timeout(Some(std::time::Duration::from_millis(500)));
        let _ = tcp.peek(&mut [0u8; 1]);
        let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    }
    c.shutdown_write();
    let mut statuses = Vec::new();
    let mut seen = Vec::new();
    loop {
        match c.try_read_response(method) {
            Ok(r) => {
                statuses.push(r.status.to_string());
                let body = r.body_str();
                if body.starts_with("seen: ") {
                    seen.push(body.trim_end().replace('\n', " | "));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => {
                statuses.push(format!("unreadable({e})"));
                break;
            }
        }
    }
    let mut text = if statuses.is_empty() { "closed".to_string() } else { statuses.join(" ") };
    for s in seen {
        text.push_str("\n    ");
        text.push_str(&s);
    }
    text
}

#[test]
fn every_model_answers_the_corpus_alike() {
    let root = Docroot::standard();
    let cgi = tempfile::Builder::new().prefix("modus-seen-").tempdir().unwrap();
    let script = cgi.path().join("seen");
    testkit::write_executable(&script, SEEN, 0o755);
    testkit::write_executable(&cgi.path().join("early"), EARLY, 0o755);
    let cgi_dir = cgi.path().to_str().unwrap().to_string();
    let srv =
        serve(MODEL, &root, &["--cgi-dir", &cgi_dir, "--header-timeout", "2s", "--keepalive-timeout", "2s"]);
    let cases = cases();
    assert!(cases.len() >= 100, "the corpus holds {} cases", cases.len());
    let mut got = String::new();
    for (name, bytes) in &cases {
        got.push_str(&format!("{name}: {}\n", answer(&srv, name, bytes)));
    }
    if std::env::var_os("MODUS_BLESS").is_some() {
        std::fs::write(ANSWERS, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(ANSWERS).expect("tests/corpus/answers.txt (MODUS_BLESS=1 writes it)");
    if got != want {
        let (got_cases, want_cases) = (split_cases(&got), split_cases(&want));
        let differ: Vec<String> = want_cases
            .iter()
            .filter(|(n, w)| got_cases.iter().find(|(g, _)| g == n).map(|(_, a)| a) != Some(w))
            .map(|(n, w)| {
                let g = got_cases.iter().find(|(g, _)| g == n).map_or("(missing)", |(_, a)| a.as_str());
                format!("{n}\n  want: {w}\n  got:  {g}")
            })
            .collect();
        panic!(
            "{MODEL} answers {} of {} cases differently:\n{}",
            differ.len(),
            want_cases.len(),
            differ.join("\n")
        );
    }
}

/// (name, the rest of its entry) for each case of an answers file.
fn split_cases(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix("    ") {
            Some(more) => {
                let last = out.last_mut().expect("a case before its lines");
                last.1.push_str(" / ");
                last.1.push_str(more);
            }
            None => {
                let (name, rest) = line.split_once(": ").unwrap_or((line, ""));
                out.push((name.to_string(), rest.to_string()));
            }
        }
    }
    out
}

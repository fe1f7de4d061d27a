//! What the two `--admin` listeners share: `modus serve`'s (a blocking
//! thread, or the process models' admin child) and `modus direct`'s
//! (served by the director's own epoll loop). Each renders its own page,
//! JSON and metrics; answering the request — which path is which, HEAD,
//! 404, 405 with `Allow`, the response head — and the small text helpers
//! of the pages are here, once. It only makes bytes: the caller does the
//! I/O, so the director's loop stays non-blocking.
#![warn(missing_docs)]

use serde_json::Value;

/// What an admin request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `/` or `/status`: the HTML page.
    Page,
    /// `/status.json`.
    Json,
    /// `/metrics`: OpenMetrics text.
    Metrics,
}

/// The `Content-Type` of each resource.
fn content_type(resource: Resource) -> &'static str {
    match resource {
        Resource::Page => "text/html; charset=utf-8",
        Resource::Json => "application/json",
        Resource::Metrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
    }
}

/// The whole response to one admin request (it always closes): `render`
/// makes the body of the resource asked for; `server` names the `Server`
/// field, if any.
pub fn answer(
    method: &h1::Method,
    path: &str,
    server: Option<&str>,
    render: impl FnOnce(Resource) -> Vec<u8>,
) -> Vec<u8> {
    let head_only = *method == h1::Method::Head;
    if !matches!(method, h1::Method::Get | h1::Method::Head) {
        return response(405, "text/plain", b"GET or HEAD\n", head_only, server);
    }
    let resource = match path {
        "/" | "/status" => Resource::Page,
        "/status.json" => Resource::Json,
        "/metrics" => Resource::Metrics,
        _ => {
            let body = b"not found: try /status, /status.json, /metrics\n";
            return response(404, "text/plain", body, head_only, server);
        }
    };
    response(200, content_type(resource), &render(resource), head_only, server)
}

/// A complete admin response: head (`Date`, `Content-Type`, `Cache-Control:
/// no-store`, `Connection: close`, `Content-Length`, and `Allow` with a
/// 405) and, unless `head_only`, `body`.
pub fn response(
    status: u16,
    content_type: &str,
    body: &[u8],
    head_only: bool,
    server: Option<&str>,
) -> Vec<u8> {
    let mut head = h1::ResponseHead::with_capacity(status, 256);
    head.date();
    if let Some(server) = server {
        head.header("Server", server);
    }
    head.header("Content-Type", content_type)
        .header("Cache-Control", "no-store")
        .header("Connection", "close")
        .header_u64("Content-Length", body.len() as u64);
    if status == 405 {
        head.header("Allow", "GET, HEAD");
    }
    let mut out = head.finish();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// Text made safe for HTML, attribute values included (the escaping of
/// the directory listings and error pages).
pub fn esc(s: &str) -> String {
    pipeline::listing::html_escape(s).into_owned()
}

/// A duration given in microseconds, in the unit that reads best; `–`
/// when there is none (no request measured yet).
pub fn fmt_us(v: &Value) -> String {
    let Some(us) = v.as_f64() else { return "–".into() };
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn each_path_gets_its_resource_and_type() {
        let get = |path: &str| text(answer(&h1::Method::Get, path, None, |r| format!("{r:?}").into_bytes()));
        for (path, body, ctype) in [
            ("/", "Page", "text/html; charset=utf-8"),
            ("/status", "Page", "text/html; charset=utf-8"),
            ("/status.json", "Json", "application/json"),
            ("/metrics", "Metrics", "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        ] {
            let r = get(path);
            assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {r}");
            assert!(r.contains(&format!("Content-Type: {ctype}\r\n")), "{r}");
            assert!(r.contains("Cache-Control: no-store\r\nConnection: close\r\n"), "{r}");
            assert!(r.ends_with(&format!("Content-Length: {}\r\n\r\n{body}", body.len())), "{r}");
        }
        let r = get("/nope");
        assert!(
            r.starts_with("HTTP/1.1 404 ") && r.ends_with("try /status, /status.json, /metrics\n"),
            "{r}"
        );
    }

    #[test]
    fn head_has_the_fields_of_get_and_no_body() {
        let r = text(answer(&h1::Method::Head, "/status.json", Some("x"), |_| b"{}".to_vec()));
        assert!(r.contains("Server: x\r\n") && r.ends_with("Content-Length: 2\r\n\r\n"), "{r}");
    }

    #[test]
    fn other_methods_get_405_with_allow_and_render_nothing() {
        let r = text(answer(&h1::Method::Post, "/status", None, |_| panic!("nothing to render")));
        assert!(r.starts_with("HTTP/1.1 405 ") && r.contains("Allow: GET, HEAD\r\n"), "{r}");
        assert!(!r.contains("Server:"));
    }

    #[test]
    fn escaping_and_durations() {
        assert_eq!(esc("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        let us = |v: Value| fmt_us(&v);
        assert_eq!(us(Value::Null), "–");
        assert_eq!(us(serde_json::json!(12.34)), "12.3 µs");
        assert_eq!(us(serde_json::json!(1500)), "1.50 ms");
        assert_eq!(us(serde_json::json!(2_500_000)), "2.50 s");
    }
}

//! CGI/1.1 (RFC 3875): which URLs run programs, the environment they get,
//! how they are started and reaped, and how their response head is read.
//!
//! The pieces, from pure to effectful:
//!
//! * [`route`] — is a (normalised) path under the CGI prefix?
//! * [`build_env`] — the meta-variables of §4.1 for one request: a pure
//!   function, unit-tested, so every rule (httpoxy, `_` in names, no
//!   `Authorization`) is visible in one place.
//! * [`parse_head`] — the script's header block (§6.2, §6.3) into a
//!   response plan: document, local redirect or client redirect; anything
//!   malformed is refused (502), never copied into the response.
//! * `lookup` and `spawn` — find the script on disk (a `stat` per path
//!   segment, so it may block: models that must not block call it on a
//!   helper) and start it in its own process group with a clean environment.
//! * [`CgiProcess`] — a running script: its pipes (non-blocking), a pidfd
//!   to learn when it exits without blocking, and a `Drop` that kills its
//!   process group and makes sure it is reaped.
//!
//! Streaming between the client and the script is `cgi_stream.rs`, driven
//! by the connection state machine.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use h1::{BodyFraming, RequestHead, Version};

/// Where scripts come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scripts {
    /// Every regular, executable file beneath this directory (`--cgi-dir`).
    Dir(PathBuf),
    /// Exactly these programs, by URL name (the demo site's programs,
    /// which are the `modus` binary itself run with arguments naming them).
    Programs(Vec<Program>),
}

/// A program one URL name runs: `command` with `args` before the
/// command-line words of §4.4, of which modus passes none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The URL segment after the prefix (`spin` for `/cgi-bin/spin`).
    pub name: String,
    /// The executable; also `SCRIPT_FILENAME`, and its directory is the working directory.
    pub command: PathBuf,
    /// Given before anything else on the command line.
    pub args: Vec<OsString>,
}

/// CGI configuration; `Settings::cgi` is `None` when CGI is off (the default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgiSettings {
    /// What runs.
    pub scripts: Scripts,
    /// URL prefix, starting and ending with '/' (`--cgi-prefix`, default `/cgi-bin/`).
    pub prefix: String,
    /// A script that makes no progress for this long is killed (`--cgi-timeout`).
    pub timeout: Duration,
    /// Most scripts running at once in this process (`--max-cgi`); beyond, 503.
    pub max_running: usize,
    /// `PATH` given to scripts (`--cgi-path`): the only variable not from the request.
    pub path_env: String,
}

impl CgiSettings {
    /// Default URL prefix.
    pub const PREFIX: &'static str = "/cgi-bin/";
    /// Default timeout: Apache's `Timeout 60`.
    pub const TIMEOUT: Duration = Duration::from_secs(60);
    /// Default cap on concurrent scripts.
    pub const MAX_RUNNING: usize = 256;
    /// Default `PATH` for scripts.
    pub const PATH: &'static str = "/usr/local/bin:/usr/bin:/bin";

    /// Scripts from `scripts` with every other setting at its default.
    pub fn new(scripts: Scripts) -> CgiSettings {
        CgiSettings {
            scripts,
            prefix: CgiSettings::PREFIX.into(),
            timeout: CgiSettings::TIMEOUT,
            max_running: CgiSettings::MAX_RUNNING,
            path_env: CgiSettings::PATH.into(),
        }
    }
}

/// Whether the normalised `path` is under the CGI prefix; the prefix
/// without its trailing slash counts too (it is then refused, never listed).
pub fn route(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix) || path == prefix.trim_end_matches('/')
}

/// What a path under the prefix names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    Script {
        file: PathBuf,
        /// Arguments of a [`Program`]; none for a script from a directory.
        args: Vec<OsString>,
        /// URL path of the script (decoded, §4.1.13).
        script_name: String,
        /// The rest of the path (decoded, §4.1.5); empty if none.
        path_info: String,
    },
    Missing,
    /// A directory, a non-executable or special file: never run, never served.
    Forbidden,
}

/// Finds the script a normalised path names: the first segment after the
/// prefix that is a file is the script, the rest is `PATH_INFO` (§4.1.5,
/// §4.1.13). Only regular files with an execute bit run (K13: anything
/// else is 403, never served as source). Blocks on `stat`.
pub(crate) fn lookup(settings: &CgiSettings, path: &str) -> Lookup {
    let prefix = settings.prefix.trim_end_matches('/');
    let rest = path.strip_prefix(prefix).unwrap_or("");
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let Some(first) = segments.first() else { return Lookup::Forbidden };
    let trailing = if path.ends_with('/') { "/" } else { "" };
    let found = |i: usize, file: PathBuf, args: Vec<OsString>| {
        let script_name = format!("{prefix}/{}", segments[..=i].join("/"));
        let path_info = if i + 1 < segments.len() {
            format!("/{}{trailing}", segments[i + 1..].join("/"))
        } else if i + 1 == segments.len() && !trailing.is_empty() {
            "/".into()
        } else {
            String::new()
        };
        Lookup::Script { file, args, script_name, path_info }
    };
    match &settings.scripts {
        Scripts::Programs(programs) => match programs.iter().find(|p| p.name == *first) {
            Some(program) => found(0, program.command.clone(), program.args.clone()),
            None => Lookup::Missing,
        },
        Scripts::Dir(dir) => {
            let mut file = dir.clone();
            for (i, segment) in segments.iter().enumerate() {
                file.push(segment);
                match std::fs::metadata(&file) {
                    Ok(meta) if meta.is_dir() => continue,
                    Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                        return found(i, file, Vec::new())
                    }
                    Ok(_) => return Lookup::Forbidden,
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Lookup::Forbidden,
                    Err(_) => return Lookup::Missing,
                }
            }
            // A directory: no listing and no index under the prefix.
            Lookup::Forbidden
        }
    }
}

/// What the environment is built from.
#[derive(Debug)]
pub struct EnvInput<'a> {
    /// The request (its framing says whether a body follows and how long:
    /// a chunked body has been de-chunked into `Length` by then).
    pub head: &'a RequestHead,
    /// `SCRIPT_NAME`: decoded URL path of the script.
    pub script_name: &'a str,
    /// `PATH_INFO`: decoded; empty if none.
    pub path_info: &'a str,
    /// The script's file (`SCRIPT_FILENAME`, as Apache and PHP expect).
    pub script_filename: &'a Path,
    /// The document root, for `PATH_TRANSLATED` and `DOCUMENT_ROOT`.
    pub document_root: Option<&'a Path>,
    /// The client.
    pub remote: SocketAddr,
    /// The address the request came in on.
    pub local: Option<SocketAddr>,
    /// `SERVER_SOFTWARE`.
    pub server_software: &'a str,
    /// `PATH`.
    pub path_env: &'a str,
    /// The request came over TLS: `HTTPS=on` and `REQUEST_SCHEME=https`
    /// (Apache's and nginx's fastcgi_params' names, which frameworks read
    /// to build their own URLs); `http` otherwise.
    pub https: bool,
}

/// Request headers that never become `HTTP_*` variables.
///
/// * `Proxy`: a client-chosen `HTTP_PROXY` is read by many HTTP libraries
///   as their proxy setting (httpoxy, CVE-2016-5385 and siblings).
/// * `Authorization`, `Proxy-Authorization`: credentials are not passed
///   (RFC 3875 §4.1.18 and §9.2 say SHOULD NOT).
/// * `Content-Length`, `Content-Type`: they are `CONTENT_LENGTH` and
///   `CONTENT_TYPE` (§4.1.18).
/// * `Transfer-Encoding`, `Expect`, `Connection`, `Keep-Alive`, `TE`,
///   `Upgrade`: the server consumed them (the body is de-chunked, the
///   expectation answered, the connection is ours).
const NOT_EXPORTED: &[&str] = &[
    "proxy",
    "authorization",
    "proxy-authorization",
    "content-length",
    "content-type",
    "transfer-encoding",
    "expect",
    "connection",
    "keep-alive",
    "te",
    "upgrade",
];

/// The meta-variables of RFC 3875 §4.1 for one request, plus the `PATH`
/// the scripts need and the de-facto standard `REQUEST_URI`,
/// `SCRIPT_FILENAME`, `DOCUMENT_ROOT`, `REMOTE_PORT`, `SERVER_ADDR`. The
/// caller starts the program with *only* these (K7: no inherited variables).
pub fn build_env(input: &EnvInput<'_>) -> Vec<(String, OsString)> {
    let head = input.head;
    let mut env: Vec<(String, OsString)> = Vec::with_capacity(24 + head.headers().len());
    let mut set = |name: &str, value: OsString| env.push((name.to_string(), value));
    let s = |v: &str| OsString::from(v);
    set("GATEWAY_INTERFACE", s("CGI/1.1"));
    set("PATH", s(input.path_env));
    set("SERVER_SOFTWARE", s(input.server_software));
    // §4.1.14: the host the client asked for (its Host or absolute-form
    // authority, without the port), else our address.
    let (host_name, host_port) = input.head.host().map(split_host_port).unwrap_or(("", None));
    let server_name = match (host_name, input.local) {
        ("", Some(local)) => local.ip().to_string(),
        ("", None) => "localhost".to_string(),
        (name, _) => name.to_string(),
    };
    set("SERVER_NAME", s(&server_name));
    // §4.1.15: the port the request was received on.
    let port = input.local.map(|l| l.port()).or(host_port).unwrap_or(80);
    set("SERVER_PORT", s(&port.to_string()));
    if let Some(local) = input.local {
        set("SERVER_ADDR", s(&local.ip().to_string()));
    }
    set(
        "SERVER_PROTOCOL",
        s(match head.version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }),
    );
    set("REQUEST_SCHEME", s(if input.https { "https" } else { "http" }));
    if input.https {
        set("HTTPS", s("on"));
    }
    set("REQUEST_METHOD", s(head.method.as_str()));
    set("REQUEST_URI", s(head.target()));
    set("SCRIPT_NAME", s(input.script_name));
    set("SCRIPT_FILENAME", input.script_filename.as_os_str().to_owned());
    // §4.1.5: PATH_INFO is not URL-encoded; §4.1.6: PATH_TRANSLATED only
    // when there is a PATH_INFO, mapped through the document root.
    if !input.path_info.is_empty() {
        set("PATH_INFO", s(input.path_info));
        if let Some(root) = input.document_root {
            let mut translated = root.as_os_str().to_owned();
            translated.push(input.path_info);
            set("PATH_TRANSLATED", translated);
        }
    }
    if let Some(root) = input.document_root {
        set("DOCUMENT_ROOT", root.as_os_str().to_owned());
    }
    // §4.1.7: the query as received (still URL-encoded), "" if none. It is
    // never turned into argv (§4.4 makes that optional; PHP-CGI's
    // CVE-2012-1823 is what doing it costs).
    set("QUERY_STRING", s(head.query().unwrap_or("")));
    let remote_addr = input.remote.ip().to_string();
    // §4.1.9: without a reverse lookup (which would cost a DNS round trip
    // per request) the address stands in for the name, as Apache does
    // with `HostnameLookups Off`.
    set("REMOTE_HOST", s(&remote_addr));
    set("REMOTE_ADDR", s(&remote_addr));
    set("REMOTE_PORT", s(&input.remote.port().to_string()));
    // §4.1.2: whenever the request declares a body, even an empty one
    // (`Content-Length: 0`, a chunked body of no chunks), as Apache does.
    if let BodyFraming::Length(n) = head.framing {
        set("CONTENT_LENGTH", s(&n.to_string()));
    }
    // §4.1.3
    if let Some(ct) = head.header("Content-Type") {
        set("CONTENT_TYPE", OsString::from_vec(ct.to_vec()));
    }
    // §4.1.18: HTTP_ + upper-cased name with '-' → '_'; repeated fields
    // joined with ", ". Names containing '_' are dropped: `X_Foo` would
    // otherwise be indistinguishable from `X-Foo` and could overwrite a
    // variable a proxy in front of us vetted (Apache 2.4, nginx).
    let mut seen: Vec<String> = Vec::new();
    for header in head.headers() {
        let lower = header.name.to_ascii_lowercase();
        if lower.contains('_') || NOT_EXPORTED.contains(&lower.as_str()) || seen.contains(&lower) {
            continue;
        }
        let mut value = Vec::new();
        for (i, v) in head.headers_named(header.name).enumerate() {
            if i > 0 {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(v);
        }
        if lower == "host" {
            // RFC 9112 §3.2.2: with an absolute-form target the Host field
            // is ignored and the target's authority names the host; the
            // script must see the host the server routed by.
            if let Some(host) = head.host() {
                value = host.as_bytes().to_vec();
            }
        }
        let name = format!("HTTP_{}", lower.to_ascii_uppercase().replace('-', "_"));
        set(&name, OsString::from_vec(value));
        seen.push(lower);
    }
    env
}

/// `host[:port]` (or `[v6][:port]`) into its parts.
fn split_host_port(host: &str) -> (&str, Option<u16>) {
    let split = if host.starts_with('[') {
        host.find(']').map(|i| i + 1).filter(|&i| host[i..].starts_with(':'))
    } else {
        host.rfind(':')
    };
    match split {
        Some(i) => (&host[..i], host[i + 1..].parse().ok()),
        None => (host, None),
    }
}

/// What the script's header block asks for (RFC 3875 §6.2).
#[derive(Debug, PartialEq, Eq)]
pub enum ScriptResponse {
    /// A document (§6.2.1), or a client redirect with a document (§6.2.4).
    Document {
        /// `Status`, or 200 (302 with an absolute `Location`, §6.2.3).
        status: u16,
        /// The reason phrase of the script's `Status`, if it gave one:
        /// sent as it is (Apache does too; RFC 9112 §4 lets it differ
        /// from the standard one).
        reason: Option<String>,
        /// `Content-Length` if the script gave one.
        content_length: Option<u64>,
        /// Every other field, validated, in order (including `Content-Type`
        /// and `Location`), minus what the server owns.
        fields: Vec<(String, Vec<u8>)>,
    },
    /// `Location: /path` (§6.2.2): the server answers as if the client
    /// had asked for that path with GET.
    LocalRedirect(String),
}

/// Fields a script may not set: framing and the connection are the
/// server's, and so are `Date` and `Server` (sent once, by us).
const SERVER_OWNED: &[&str] =
    &["connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "date", "server"];

/// Parses the header block at the start of a script's output. `Ok(None)`:
/// not complete yet. `Ok(Some((response, len)))`: `len` bytes were the
/// head, the rest is body. `Err(why)`: not a valid CGI response (the
/// caller answers 502 and logs `why`); also when no blank line comes within
/// `max` bytes.
///
/// Lines end in LF or CRLF (§6.3: scripts write `NL`). Stricter than most
/// servers where leniency would be dangerous (bad-input K8): an invalid
/// field name, a control character in a value, an obsolete line fold, or a
/// malformed `Status` refuses the whole response; nothing from it is ever
/// copied into our response unvalidated (response splitting, Apache
/// CVE-2024-24795).
pub fn parse_head(buf: &[u8], max: usize) -> Result<Option<(ScriptResponse, usize)>, &'static str> {
    let mut pos = 0;
    let mut status: Option<u16> = None;
    let mut reason: Option<String> = None;
    let mut location: Option<String> = None;
    let mut content_type = false;
    let mut content_length: Option<u64> = None;
    let mut fields: Vec<(String, Vec<u8>)> = Vec::new();
    loop {
        let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
            return if buf.len() >= max { Err("no end of the header block") } else { Ok(None) };
        };
        let end = pos + nl + 1;
        if end > max {
            return Err("header block too large");
        }
        let mut line = &buf[pos..pos + nl];
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        pos = end;
        if line.is_empty() {
            break;
        }
        let colon = line.iter().position(|&b| b == b':').ok_or("a header line without ':'")?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err("invalid header name");
        }
        let value = trim_ows(value);
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err("control character in a header value");
        }
        // Lossless: tchars are ASCII.
        let name = String::from_utf8_lossy(name).into_owned();
        match name.to_ascii_lowercase().as_str() {
            // §6.3.3: Status = "Status:" status-code SP reason-phrase
            "status" => {
                if status.is_some() {
                    return Err("more than one Status");
                }
                let code =
                    value.get(..3).filter(|c| c.iter().all(u8::is_ascii_digit)).ok_or("invalid Status")?;
                if value.len() > 3 && value[3] != b' ' {
                    return Err("invalid Status");
                }
                let code: u16 =
                    std::str::from_utf8(code).ok().and_then(|c| c.parse().ok()).ok_or("invalid Status")?;
                if !(200..=599).contains(&code) {
                    // 1xx would be an interim response: never a script's final answer.
                    return Err("Status out of range");
                }
                status = Some(code);
                // Control characters were refused with the value above.
                reason = std::str::from_utf8(value.get(4..).unwrap_or_default())
                    .ok()
                    .filter(|r| !r.is_empty())
                    .map(str::to_owned);
            }
            "location" => {
                if location.is_some() {
                    return Err("more than one Location");
                }
                let text = std::str::from_utf8(value).map_err(|_| "Location is not ASCII")?;
                if text.is_empty() || text.bytes().any(|b| b == b' ' || !b.is_ascii()) {
                    return Err("invalid Location");
                }
                location = Some(text.to_string());
                fields.push((name, value.to_vec()));
            }
            "content-length" => {
                if content_length.is_some() || value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                    return Err("invalid Content-Length");
                }
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or("invalid Content-Length")?;
                content_length = Some(n);
            }
            "content-type" => {
                content_type = true;
                fields.push((name, value.to_vec()));
            }
            lower if SERVER_OWNED.contains(&lower) => {}
            _ => fields.push((name, value.to_vec())),
        }
    }
    if let Some(location) = &location {
        // §6.2.2: a local Location (an absolute path; `//host` is a
        // network-path reference, i.e. another server) without a Status of
        // its own is handled inside the server.
        let local = location.starts_with('/') && !location.starts_with("//");
        if local && status.is_none_or(|s| s == 200) {
            return Ok(Some((ScriptResponse::LocalRedirect(location.clone()), pos)));
        }
        // §6.2.3: a client redirect is a 302 unless the script says otherwise.
        let status = status.unwrap_or(302);
        return Ok(Some((ScriptResponse::Document { status, reason, content_length, fields }, pos)));
    }
    // §6.3.1: a document needs a Content-Type; a bare Status (say 204, or
    // an error the script describes itself) is accepted without one.
    if !content_type && status.is_none() {
        return Err("neither Content-Type, Location nor Status");
    }
    let status = status.unwrap_or(200);
    Ok(Some((ScriptResponse::Document { status, reason, content_length, fields }, pos)))
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

mod process;

pub use process::CgiProcess;
pub(crate) use process::{spawn, Runtime, SpawnError};

#[cfg(test)]
mod tests {
    use super::*;
    use h1::Method;

    /// The head of a request with these fields; HTTP/1.0 unless there is a
    /// Host, which 1.1 requires.
    fn head(method: Method, target: &str, headers: &[(&str, &str)], framing: BodyFraming) -> RequestHead {
        let has_host = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host"));
        let version = if has_host { "HTTP/1.1" } else { "HTTP/1.0" };
        let mut raw = format!("{} {target} {version}\r\n", method.as_str());
        for (name, value) in headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("\r\n");
        let h1::Parsed::Complete { head, .. } =
            h1::parse_request(raw.as_bytes(), &h1::Limits::default()).unwrap()
        else {
            panic!("incomplete: {raw:?}");
        };
        assert_eq!(head.framing, framing, "{raw:?}");
        head
    }

    fn env_of(head: &RequestHead, script_name: &str, path_info: &str) -> Vec<(String, String)> {
        let input = EnvInput {
            head,
            script_name,
            path_info,
            script_filename: Path::new("/srv/cgi/env"),
            document_root: Some(Path::new("/srv/www")),
            remote: "192.0.2.7:40000".parse().unwrap(),
            local: Some("127.0.0.1:8080".parse().unwrap()),
            server_software: "modus/test",
            path_env: "/bin",
            https: false,
        };
        build_env(&input).into_iter().map(|(k, v)| (k, v.into_string().unwrap())).collect()
    }

    fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        let all: Vec<_> = env.iter().filter(|(k, _)| k == name).collect();
        assert!(all.len() <= 1, "{name} set twice");
        all.first().map(|(_, v)| v.as_str())
    }

    #[test]
    fn required_meta_variables() {
        let h = head(
            Method::Get,
            "/cgi-bin/env/a%20b?x=1&y=%41",
            &[("Host", "example.org:8080")],
            BodyFraming::None,
        );
        let env = env_of(&h, "/cgi-bin/env", "/a b");
        assert_eq!(var(&env, "GATEWAY_INTERFACE"), Some("CGI/1.1"));
        assert_eq!(var(&env, "SERVER_SOFTWARE"), Some("modus/test"));
        assert_eq!(var(&env, "SERVER_NAME"), Some("example.org"));
        assert_eq!(var(&env, "SERVER_PORT"), Some("8080"));
        assert_eq!(var(&env, "SERVER_PROTOCOL"), Some("HTTP/1.1"));
        assert_eq!(var(&env, "REQUEST_METHOD"), Some("GET"));
        assert_eq!(var(&env, "REQUEST_SCHEME"), Some("http"));
        assert_eq!(var(&env, "HTTPS"), None);
        assert_eq!(var(&env, "SCRIPT_NAME"), Some("/cgi-bin/env"));
        assert_eq!(var(&env, "PATH_INFO"), Some("/a b"), "decoded (§4.1.5)");
        assert_eq!(var(&env, "PATH_TRANSLATED"), Some("/srv/www/a b"));
        assert_eq!(var(&env, "QUERY_STRING"), Some("x=1&y=%41"), "as received (§4.1.7)");
        assert_eq!(var(&env, "REMOTE_ADDR"), Some("192.0.2.7"));
        assert_eq!(var(&env, "REMOTE_HOST"), Some("192.0.2.7"), "no lookup: the address (§4.1.9)");
        assert_eq!(var(&env, "REMOTE_PORT"), Some("40000"));
        assert_eq!(var(&env, "REQUEST_URI"), Some("/cgi-bin/env/a%20b?x=1&y=%41"));
        assert_eq!(var(&env, "PATH"), Some("/bin"));
        assert_eq!(var(&env, "HTTP_HOST"), Some("example.org:8080"));
        assert_eq!(var(&env, "CONTENT_LENGTH"), None, "no body, no CONTENT_LENGTH (§4.1.2)");
        assert_eq!(var(&env, "CONTENT_TYPE"), None);
    }

    #[test]
    fn an_absolute_form_target_names_the_host() {
        let h = head(Method::Get, "http://other.example/cgi-bin/env", &[("Host", "h")], BodyFraming::None);
        let env = env_of(&h, "/cgi-bin/env", "");
        assert_eq!(var(&env, "HTTP_HOST"), Some("other.example"), "RFC 9112 §3.2.2: Host is ignored");
        assert_eq!(var(&env, "SERVER_NAME"), Some("other.example"));
    }

    #[test]
    fn no_path_info_means_no_path_translated_and_empty_query() {
        let h = head(Method::Get, "/cgi-bin/env", &[], BodyFraming::None);
        let env = env_of(&h, "/cgi-bin/env", "");
        assert_eq!(var(&env, "PATH_INFO"), None);
        assert_eq!(var(&env, "PATH_TRANSLATED"), None);
        assert_eq!(var(&env, "QUERY_STRING"), Some(""), "MUST be set, empty (§4.1.7)");
        assert_eq!(var(&env, "SERVER_NAME"), Some("127.0.0.1"), "no Host: our address");
    }

    #[test]
    fn body_variables_and_consumed_headers() {
        let h = head(
            Method::Post,
            "/cgi-bin/echo",
            &[
                ("Host", "h"),
                ("Content-Type", "text/plain"),
                ("Content-Length", "5"),
                ("Expect", "100-continue"),
                ("Connection", "keep-alive"),
            ],
            BodyFraming::Length(5),
        );
        let env = env_of(&h, "/cgi-bin/echo", "");
        assert_eq!(var(&env, "CONTENT_LENGTH"), Some("5"));
        assert_eq!(var(&env, "CONTENT_TYPE"), Some("text/plain"));
        for gone in ["HTTP_CONTENT_LENGTH", "HTTP_CONTENT_TYPE", "HTTP_EXPECT", "HTTP_CONNECTION"] {
            assert_eq!(var(&env, gone), None, "{gone}");
        }
        let empty = head(Method::Post, "/cgi-bin/echo", &[("Content-Length", "0")], BodyFraming::Length(0));
        let env = env_of(&empty, "/cgi-bin/echo", "");
        assert_eq!(var(&env, "CONTENT_LENGTH"), Some("0"), "a declared empty body");
    }

    #[test]
    fn httpoxy_underscores_and_credentials_are_dropped() {
        let h = head(
            Method::Get,
            "/cgi-bin/env",
            &[
                ("Proxy", "http://evil:1"),
                ("X_Forwarded_For", "spoof"),
                ("X-Forwarded-For", "real"),
                ("Authorization", "Basic eA=="),
                ("Proxy-Authorization", "Basic eA=="),
                ("Accept", "a"),
                ("accept", "b"),
            ],
            BodyFraming::None,
        );
        let env = env_of(&h, "/cgi-bin/env", "");
        assert_eq!(var(&env, "HTTP_PROXY"), None, "httpoxy");
        assert_eq!(var(&env, "HTTP_X_FORWARDED_FOR"), Some("real"), "the `_` spelling cannot override");
        assert_eq!(var(&env, "HTTP_AUTHORIZATION"), None);
        assert_eq!(var(&env, "HTTP_PROXY_AUTHORIZATION"), None);
        assert_eq!(var(&env, "HTTP_ACCEPT"), Some("a, b"), "repeated fields joined (§4.1.18)");
    }

    #[test]
    fn ipv6_host_and_port() {
        assert_eq!(split_host_port("[::1]:8080"), ("[::1]", Some(8080)));
        assert_eq!(split_host_port("[::1]"), ("[::1]", None));
        assert_eq!(split_host_port("example.org"), ("example.org", None));
    }

    fn doc(buf: &str) -> (u16, Option<u64>, Vec<(String, String)>, usize) {
        match parse_head(buf.as_bytes(), 1024) {
            Ok(Some((ScriptResponse::Document { status, content_length, fields, .. }, len))) => (
                status,
                content_length,
                fields.into_iter().map(|(n, v)| (n, String::from_utf8(v).unwrap())).collect(),
                len,
            ),
            other => panic!("{buf:?}: {other:?}"),
        }
    }

    #[test]
    fn document_responses() {
        let (status, cl, fields, len) = doc("Content-Type: text/plain\n\nhello");
        assert_eq!((status, cl, len), (200, None, 26));
        assert_eq!(fields, [("Content-Type".to_string(), "text/plain".to_string())]);
        let (status, cl, fields, _) =
            doc("Status: 404 Not Here\r\nContent-type:text/html\r\nContent-Length: 3\r\nX-A:  b \r\nServer: x\r\n\r\n");
        assert_eq!((status, cl), (404, Some(3)));
        assert_eq!(fields.len(), 2, "Server is ours: {fields:?}");
        assert_eq!(fields[1], ("X-A".to_string(), "b".to_string()));
        assert_eq!(doc("Status: 204\n\n").0, 204, "a bare status needs no Content-Type");
        let reason = |buf: &str| match parse_head(buf.as_bytes(), 1024) {
            Ok(Some((ScriptResponse::Document { reason, .. }, _))) => reason,
            other => panic!("{buf:?}: {other:?}"),
        };
        assert_eq!(reason("Status: 404 Gone Fishing\n\n").as_deref(), Some("Gone Fishing"));
        assert_eq!(reason("Status: 404\n\n"), None);
    }

    #[test]
    fn redirects() {
        assert_eq!(
            parse_head(b"Location: /other?x=1\n\n", 1024),
            Ok(Some((ScriptResponse::LocalRedirect("/other?x=1".into()), 22)))
        );
        let (status, _, fields, _) = doc("Location: http://example.org/\n\n");
        assert_eq!(status, 302, "client redirect (§6.2.3)");
        assert_eq!(fields[0].1, "http://example.org/");
        assert_eq!(
            doc("Status: 301\nLocation: /x\n\n").0,
            301,
            "a local path with a status goes to the client"
        );
        assert_eq!(doc("Location: //evil.example/\n\n").0, 302, "network-path reference is not local");
    }

    #[test]
    fn partial_and_invalid_heads() {
        assert_eq!(parse_head(b"Content-Type: text/plain\n", 1024), Ok(None));
        assert_eq!(parse_head(b"", 1024), Ok(None));
        for bad in [
            "X-Only: 1\n\n",
            "no colon here\n\n",
            "Bad Name: x\nContent-Type: a\n\n",
            "Content-Type: a\x01b\n\n",
            "Status: abc\n\n",
            "Status: 99\n\n",
            "Status: 100 Continue\n\n",
            "Status: 2000\n\n",
            "Status: 200\nStatus: 200\n\n",
            "Content-Type: a\nContent-Length: x\n\n",
            "Content-Type: a\nContent-Length: 1\nContent-Length: 1\n\n",
            "Content-Type: a\n folded\n\n",
            "HTTP/1.1 200 OK\nContent-Type: a\n\n",
        ] {
            assert!(parse_head(bad.as_bytes(), 1024).is_err(), "{bad:?}");
        }
        assert!(parse_head(&[b'a'; 2000], 1024).is_err(), "no end within the limit");
    }

    #[test]
    fn routing_and_lookup() {
        assert!(route("/cgi-bin/", "/cgi-bin/x"));
        assert!(route("/cgi-bin/", "/cgi-bin"));
        assert!(!route("/cgi-bin/", "/cgi-binx"));
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, mode: u32| {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        write("run", 0o755);
        write("sub/deep", 0o755);
        write("source", 0o644);
        let s = CgiSettings::new(Scripts::Dir(dir.path().to_path_buf()));
        let script = |path: &str| match lookup(&s, path) {
            Lookup::Script { script_name, path_info, .. } => (script_name, path_info),
            other => panic!("{path}: {other:?}"),
        };
        assert_eq!(script("/cgi-bin/run"), ("/cgi-bin/run".into(), "".into()));
        assert_eq!(script("/cgi-bin/run/a/b/"), ("/cgi-bin/run".into(), "/a/b/".into()));
        assert_eq!(script("/cgi-bin/run/"), ("/cgi-bin/run".into(), "/".into()));
        assert_eq!(script("/cgi-bin/sub/deep/x"), ("/cgi-bin/sub/deep".into(), "/x".into()));
        assert_eq!(lookup(&s, "/cgi-bin/source"), Lookup::Forbidden, "not executable: never run nor served");
        assert_eq!(lookup(&s, "/cgi-bin/sub/"), Lookup::Forbidden);
        assert_eq!(lookup(&s, "/cgi-bin/"), Lookup::Forbidden);
        assert_eq!(lookup(&s, "/cgi-bin/nope"), Lookup::Missing);
    }
}

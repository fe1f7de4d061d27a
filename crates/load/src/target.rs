//! What to request and from where: the URL(s), the loopback check, weighted
//! mixes (`--mix FILE`) and SURGE request streams (`--workload DIR`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// A parsed `http://host[:port]/path?query` (or `https://`) URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `https://`: the requests go over TLS.
    pub https: bool,
    /// Host as written (for the `Host` header and resolution).
    pub host: String,
    /// Port (80, or 443 for https, by default).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// Parses an absolute `http://` or `https://` URL.
    pub fn parse(s: &str) -> Result<Url> {
        let (https, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => bail!("{s:?}: an http:// or https:// URL is expected"),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').with_context(|| format!("{s:?}: unterminated [IPv6] host"))?;
            let port = v6[end + 1..].strip_prefix(':');
            (&authority[..end + 2], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            bail!("{s:?}: no host");
        }
        let port = match port {
            Some(p) => p.parse().with_context(|| format!("{s:?}: bad port {p:?}"))?,
            None if https => 443,
            None => 80,
        };
        let path = path.split('#').next().unwrap_or("/").to_string();
        Ok(Url { https, host: host.to_string(), port, path })
    }

    /// `host:port` for the Host header (port omitted when it is the scheme's).
    pub fn authority(&self) -> String {
        if self.port == if self.https { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Resolves `reference` (an absolute URL on the same server, an absolute
    /// path, or a path relative to this URL's directory).
    pub fn join(&self, reference: &str) -> Result<String> {
        if reference.starts_with("http://") || reference.starts_with("https://") {
            let u = Url::parse(reference)?;
            if (u.https, u.host.as_str(), u.port) != (self.https, self.host.as_str(), self.port) {
                bail!(
                    "{reference:?} is on another server than {}: one target server per run",
                    self.authority()
                );
            }
            return Ok(u.path);
        }
        if reference.starts_with('/') {
            return Ok(reference.to_string());
        }
        let dir = self.path.split('?').next().unwrap_or("/");
        let dir = &dir[..dir.rfind('/').map_or(0, |i| i + 1)];
        Ok(format!("{}{reference}", if dir.is_empty() { "/" } else { dir }))
    }
}

/// Is this address on the loopback network (127.0.0.0/8, ::1, or an
/// IPv4-mapped loopback)?
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// Resolves the URL's host. Unless `allow_remote`, every address it
/// resolves to must be loopback: a load generator aimed at someone else's
/// machine is an attack.
pub fn resolve(url: &Url, allow_remote: bool) -> Result<SocketAddr> {
    let host = url.host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> =
        (host, url.port).to_socket_addrs().with_context(|| format!("cannot resolve {}", url.host))?.collect();
    let first = *addrs.first().with_context(|| format!("{} resolves to no address", url.host))?;
    if !allow_remote {
        if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.ip())) {
            bail!(
                "refusing to load {} ({}): not a loopback address (127.0.0.0/8 or ::1); \
                 pass --allow-remote if you own the target",
                url.host,
                bad.ip()
            );
        }
    }
    Ok(first)
}

/// One request target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Path and query.
    pub path: String,
    /// Index into the class names.
    pub class: usize,
    /// Expected body size, when the workload knows it (verified).
    pub expect_len: Option<u64>,
    /// Expected body checksum (FNV-1a 64), when the workload has the file
    /// on disk: `--checksum` then compares with the file, not with the
    /// first body received.
    pub expect_sum: Option<u64>,
}

/// How the next target is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum Chooser {
    /// Cycle through the targets.
    RoundRobin,
    /// Pick by weight (cumulative, normalised to end at 1.0).
    Weighted(Vec<f64>),
    /// Replay a SURGE stream in order. Closed loop: user `u`'s requests go
    /// on connection `u % connections`, in the user's own order, with its
    /// OFF times; open loop: one shared cursor. Ends with the stream
    /// unless `--repeat-stream`.
    Stream(Vec<StreamRef>),
}

/// One request of a replayed stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamRef {
    /// Target index.
    pub target: u32,
    /// The SURGE user equivalent that sends it.
    pub user: u32,
    /// The user's OFF time before it (µs).
    pub off_us: u64,
    /// Its time in the stream (µs since the stream's start).
    pub time_us: u64,
}

/// Everything the engine needs to know about what to request.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The targets.
    pub targets: Vec<Target>,
    /// Class names (per-class latency is reported per name).
    pub classes: Vec<String>,
    /// Choice rule.
    pub chooser: Chooser,
    /// A description for the report.
    pub describe: String,
}

fn class_index(classes: &mut Vec<String>, name: &str) -> usize {
    classes.iter().position(|c| c == name).unwrap_or_else(|| {
        classes.push(name.to_string());
        classes.len() - 1
    })
}

impl Workload {
    /// One or more URLs in round-robin order (each its own class).
    pub fn urls(base: &Url, urls: &[Url]) -> Result<Workload> {
        let mut classes = Vec::new();
        let mut targets = Vec::new();
        for u in urls {
            if (u.https, u.host.as_str(), u.port) != (base.https, base.host.as_str(), base.port) {
                bail!(
                    "{}:{} and {}:{}: all URLs must name the same server",
                    base.host,
                    base.port,
                    u.host,
                    u.port
                );
            }
            let class = class_index(&mut classes, &u.path);
            targets.push(Target { path: u.path.clone(), class, expect_len: None, expect_sum: None });
        }
        let describe =
            if urls.len() == 1 { "1 URL".into() } else { format!("{} URLs, round-robin", urls.len()) };
        Ok(Workload { targets, classes, chooser: Chooser::RoundRobin, describe })
    }

    /// A `--mix` file: one `WEIGHT URL` per line, `#` comments.
    pub fn mix(base: &Url, text: &str) -> Result<Workload> {
        let mut classes = Vec::new();
        let mut targets = Vec::new();
        let mut weights = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(w), Some(u), None) = (parts.next(), parts.next(), parts.next()) else {
                bail!("mix line {}: want `WEIGHT URL`, got {line:?}", i + 1);
            };
            // `30` and `30%` mean the same: weights are normalised anyway.
            let w: f64 = w
                .strip_suffix('%')
                .unwrap_or(w)
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .with_context(|| {
                    format!("mix line {}: weight {w:?} is not a non-negative number (or percentage)", i + 1)
                })?;
            let path = base.join(u).with_context(|| format!("mix line {}", i + 1))?;
            let class = class_index(&mut classes, &path);
            targets.push(Target { path, class, expect_len: None, expect_sum: None });
            weights.push(w);
        }
        let total: f64 = weights.iter().sum();
        if targets.is_empty() || total <= 0.0 {
            bail!("the mix has no URL with a positive weight");
        }
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        let describe = format!("mix of {} URLs", targets.len());
        Ok(Workload { targets, classes, chooser: Chooser::Weighted(cumulative), describe })
    }

    /// A SURGE request stream written by `modus workload surge`: the files
    /// of `DIR/stream.txt`, classed by size, each response's length checked
    /// against the file's size; with `checksum`, each body against the
    /// hash of `DIR/docs/PATH`.
    pub fn replay(base: &Url, dir: &Path, checksum: bool) -> Result<Workload> {
        let path = dir.join(crate::surge::STREAM_FILE);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut classes = Vec::new();
        let mut targets: Vec<Target> = Vec::new();
        let mut index = std::collections::HashMap::new();
        let mut seq = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let e = crate::surge::StreamEntry::parse(line)
                .with_context(|| format!("{} line {}: {line:?}", path.display(), i + 1))?;
            let ti = match index.get(&e.path) {
                Some(&ti) => ti,
                None => {
                    let class = class_index(&mut classes, e.size.map_or("cgi", crate::surge::size_class));
                    let full = base.join(e.path.trim_start_matches('/')).unwrap_or_else(|_| e.path.clone());
                    let expect_sum = if checksum && e.size.is_some() {
                        let file = dir.join(crate::surge::DOCS_DIR).join(e.path.trim_start_matches('/'));
                        let body =
                            std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
                        Some(crate::http::fnv1a(&body))
                    } else {
                        None
                    };
                    targets.push(Target { path: full, class, expect_len: e.size, expect_sum });
                    index.insert(e.path.clone(), targets.len() - 1);
                    targets.len() - 1
                }
            };
            seq.push(StreamRef { target: ti as u32, user: e.user, off_us: e.off_us, time_us: e.time_us });
        }
        if seq.is_empty() {
            bail!("{} holds no requests", path.display());
        }
        let users = seq.iter().map(|r| r.user).collect::<std::collections::HashSet<_>>().len();
        let describe = format!(
            "SURGE stream {} ({} requests, {} files, {users} users)",
            dir.display(),
            seq.len(),
            targets.len()
        );
        Ok(Workload { targets, classes, chooser: Chooser::Stream(seq), describe })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8080/a/b.txt?x=1").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.path.as_str()), ("127.0.0.1", 8080, "/a/b.txt?x=1"));
        assert_eq!(Url::parse("http://localhost").unwrap().path, "/");
        assert_eq!(Url::parse("http://[::1]:81/").unwrap().host, "[::1]");
        let tls = Url::parse("https://localhost/x").unwrap();
        assert_eq!((tls.https, tls.port, tls.authority().as_str()), (true, 443, "localhost"));
        assert!(tls.join("http://localhost:443/x").is_err(), "another scheme is another server");
        assert_eq!(Url::parse("https://localhost:8443/").unwrap().authority(), "localhost:8443");
        assert!(!Url::parse("http://x/").unwrap().https);
        assert!(Url::parse("ftp://x/").is_err());
        assert!(Url::parse("http://h:99999/").is_err());
        assert_eq!(u.join("/cgi-bin/spin?ms=10").unwrap(), "/cgi-bin/spin?ms=10");
        assert_eq!(u.join("c.bin").unwrap(), "/a/c.bin");
        assert_eq!(u.join("http://127.0.0.1:8080/z").unwrap(), "/z");
        assert!(u.join("http://127.0.0.1:9/z").is_err());
    }

    #[test]
    fn loopback_only_unless_allowed() {
        assert!(resolve(&Url::parse("http://127.0.0.1:1/").unwrap(), false).is_ok());
        assert!(resolve(&Url::parse("http://127.9.8.7:1/").unwrap(), false).is_ok());
        assert!(resolve(&Url::parse("http://[::1]:1/").unwrap(), false).is_ok());
        let err = resolve(&Url::parse("http://10.1.2.3:1/").unwrap(), false).unwrap_err();
        assert!(err.to_string().contains("--allow-remote"), "{err}");
        assert!(resolve(&Url::parse("http://10.1.2.3:1/").unwrap(), true).is_ok());
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn mix_files() {
        let base = Url::parse("http://127.0.0.1:8080/").unwrap();
        let w = Workload::mix(&base, "# papers' CGI ratio\n30 /cgi-bin/spin?ms=10\n70 115k.bin\n").unwrap();
        assert_eq!(w.targets[1].path, "/115k.bin");
        let Chooser::Weighted(c) = &w.chooser else { panic!() };
        assert!((c[0] - 0.3).abs() < 1e-9 && (c[1] - 1.0).abs() < 1e-9);
        let pct = Workload::mix(&base, "30% /cgi-bin/spin?ms=10\n70% /115k.bin\n").unwrap();
        assert_eq!(pct.chooser, w.chooser, "percentages are weights");
        assert!(Workload::mix(&base, "x /a\n").is_err());
        assert!(Workload::mix(&base, "%30 /a\n").is_err());
        assert!(Workload::mix(&base, "0 /a\n").is_err());
        assert!(Workload::mix(&base, "1 /a extra\n").is_err());
    }
}

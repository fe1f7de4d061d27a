//! Other servers measured beside modus — nginx, lighttpd, h2o, Apache
//! httpd's three MPMs and worker with mod_file_cache — and the fronts a server can stand behind — `modus
//! direct` and HAProxy —, each peer from a configuration the lab writes
//! (checked with the program's own check before use), on its own port and
//! directory, in the foreground, stopped by PID. A peer that is not
//! installed is skipped, and the report says so.
//!
//! Like the modus models in the lab, they serve without an access log
//! (unless the experiment has `access-log = true`: then to its file), with
//! keep-alive unlimited, one worker process where the server has the choice
//! (the lab pins servers to CPUs; `server-cpus` decides how many they get).
//! Apache runs as Debian configures its MPMs (prefork sized like `modus
//! serve --model prefork`: up to 256 clients at once).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The web servers the lab can run beside the models.
pub const PEERS: [&str; 8] = [
    "nginx",
    "nginx-tuned",
    "lighttpd",
    "h2o",
    "apache-prefork",
    "apache-worker",
    "apache-event",
    "apache-worker-cache",
];

/// What can stand in front of a server's backends: the director, or HAProxy.
pub const FRONTS: [&str; 2] = ["direct", "haproxy"];

/// What a peer serves: a directory, and optionally CGI programs under `/cgi-bin/`.
#[derive(Clone, Copy, Debug)]
pub struct Site<'a> {
    pub docroot: &'a Path,
    pub cgi: Option<&'a Path>,
    /// The server's `max-clients` (Apache: MaxRequestWorkers), if the spec sets one.
    pub max_clients: Option<usize>,
    /// The access log's file (Combined format where the server has it);
    /// none: no access log.
    pub access_log: Option<&'a Path>,
}

/// The program a peer runs (Apache's MPMs are one binary).
pub fn program(peer: &str) -> &str {
    if peer.starts_with("apache-") {
        "apache2"
    } else if peer == "nginx-tuned" {
        "nginx"
    } else {
        peer
    }
}

/// Whether the peer runs CGI programs (nginx and h2o do not, here).
pub fn runs_cgi(peer: &str) -> bool {
    peer == "lighttpd" || peer.starts_with("apache-")
}

/// Whether the peer's workers run as another user than the lab (Apache
/// refuses to serve as root: its children become www-data, who must be
/// able to reach the files).
pub fn drops_root(peer: &str) -> bool {
    peer.starts_with("apache-") && rustix::process::geteuid().is_root()
}

/// The peer's binary, if installed (Debian puts them in /usr/sbin).
pub fn binary(peer: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program(peer)))
        .find(|p| p.is_file())
}

/// The peer's version line, for `meta.json`.
pub fn version(peer: &str, bin: &Path) -> String {
    let out = Command::new(bin).arg("-v").output();
    let text =
        out.map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)));
    text.ok()
        .and_then(|t| t.lines().next().map(str::to_string))
        .unwrap_or_else(|| format!("{peer} (version unknown)"))
}

/// The configuration serving `site` on `host`:`port`, with its working
/// files in `dir`.
pub fn config(peer: &str, dir: &Path, site: Site, host: &str, port: u16) -> Result<String> {
    let (dir, root) = (dir.display(), site.docroot.display());
    let log = site.access_log.map(|l| l.display().to_string());
    Ok(match peer {
        "nginx" | "nginx-tuned" => {
            // `nginx-tuned` as a site tuned for static files would run it:
            // open descriptors and their stat kept between requests
            // (`open_file_cache`; without it nginx opens, stats and closes
            // the file for every request, as modus's cache does not), and
            // the access log written in 64 KiB blocks rather than a
            // write(2) per request. sendfile and tcp_nopush both have.
            let tuned = peer == "nginx-tuned";
            let cache = if tuned {
                "    open_file_cache max=10000 inactive=60s;\n    open_file_cache_valid 60s;\n    \
                 open_file_cache_errors on;\n"
            } else {
                ""
            };
            let buffer = if tuned { " buffer=64k flush=1s" } else { "" };
            // As root, nginx's workers would run as `nobody`, who may not
            // read a docroot under a private temporary directory.
            let user = if rustix::process::geteuid().is_root() { "user root;" } else { "" };
            format!(
                "# written by modus lab\n{user}\nworker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\n\
                 error_log {dir}/error.log warn;\nworker_rlimit_nofile 20000;\nevents {{ worker_connections 10000; }}\n\
                 http {{\n    default_type application/octet-stream;\n    sendfile on;\n    tcp_nopush on;\n\
                 keepalive_requests 100000000;\n{cache}    access_log {access};\n    client_body_temp_path {dir}/body;\n\
                 proxy_temp_path {dir}/proxy;\n    fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n\
                 scgi_temp_path {dir}/scgi;\n    server {{\n        listen {host}:{port};\n        root {root};\n\
                 location / {{ }}\n    }}\n}}\n",
                access = log.as_deref().map_or("off".to_string(), |l| format!("{l} combined{buffer}"))
            )
        }
        "lighttpd" => {
            let cgi = match site.cgi {
                Some(cgi) => format!(
                    "server.modules += ( \"mod_alias\", \"mod_cgi\" )\nalias.url = ( \"/cgi-bin/\" => \"{}/\" )\n\
                     $HTTP[\"url\"] =~ \"^/cgi-bin/\" {{ cgi.assign = ( \"\" => \"\" ) }}\n",
                    cgi.display()
                ),
                None => String::new(),
            };
            format!(
                "# written by modus lab\nserver.document-root = \"{root}\"\nserver.bind = \"{host}\"\n\
                 server.port = {port}\nserver.errorlog = \"{dir}/error.log\"\nserver.max-keep-alive-requests = 100000000\n\
                 server.max-fds = 20000\nserver.max-connections = 10240\n\
                 mimetype.assign = ( \".html\" => \"text/html\", \".txt\" => \"text/plain\", \"\" => \"application/octet-stream\" )\n{cgi}{access}",
                // mod_accesslog's default puts the Host where Combined has the ident: Combined, spelt out.
                access = log.as_deref().map_or(String::new(), |l| format!(
                    "server.modules += ( \"mod_accesslog\" )\naccesslog.filename = \"{l}\"\n\
                     accesslog.format = \"%h %l %u %t \\\"%r\\\" %>s %b \\\"%{{Referer}}i\\\" \\\"%{{User-Agent}}i\\\"\"\n"
                ))
            )
        }
        "h2o" => {
            // As root h2o wants to be told whom to run as; root keeps the
            // docroot readable wherever the results directory is.
            let user = if rustix::process::geteuid().is_root() { "user: root\n" } else { "" };
            format!(
                "# written by modus lab\n{user}num-threads: 1\npid-file: {dir}/h2o.pid\n\
                 error-log: {dir}/error.log\nmax-connections: 10240\nlisten:\n  host: {host}\n  port: {port}\n\
                 hosts:\n  default:\n    paths:\n      /:\n        file.dir: \"{root}\"\n{access}",
                // h2o's default access-log format is the Combined one.
                access = log.as_deref().map_or(String::new(), |l| format!("access-log: {l}\n"))
            )
        }
        apache if apache.starts_with("apache-") => apache_config(apache, &dir.to_string(), site, host, port)?,
        other => bail!("no peer {other:?} (the lab knows {})", PEERS.join(", ")),
    })
}

/// Apache httpd with one MPM, from Debian's modules, everything it writes
/// (pid file, error log, runtime files, its `mime.types`) in `dir`, its
/// `ServerRoot`. CGI as Debian sets it up: mod_cgi under prefork, mod_cgid
/// (a daemon that forks the scripts) under the threaded MPMs. `-cache`
/// after the MPM adds mod_file_cache over the docroot ([`file_cache`]).
/// Apache's MaxRequestWorkers where the spec sets none: prefork's and the
/// threaded MPMs' as configured below.
pub const APACHE_PREFORK_WORKERS: usize = 256;
pub const APACHE_THREADED_WORKERS: usize = 150;

fn apache_config(peer: &str, dir: &str, site: Site, host: &str, port: u16) -> Result<String> {
    let mpm = peer.trim_start_matches("apache-");
    let (mpm, cached) = mpm.strip_suffix("-cache").map_or((mpm, false), |m| (m, true));
    let sizing = match (mpm, site.max_clients) {
        ("prefork", None) => {
            format!("StartServers 64\nMinSpareServers 10\nMaxSpareServers 64\nServerLimit {APACHE_PREFORK_WORKERS}\nMaxRequestWorkers {APACHE_PREFORK_WORKERS}\n")
        }
        ("worker" | "event", None) => {
            format!("StartServers 3\nThreadsPerChild 25\nMinSpareThreads 25\nMaxSpareThreads 75\nThreadLimit 64\nMaxRequestWorkers {APACHE_THREADED_WORKERS}\n")
        }
        // The spec's `max-clients` (paper 001's MaxClients 80).
        ("prefork", Some(n)) => {
            let start = n.min(64);
            format!(
                "StartServers {start}\nMinSpareServers {}\nMaxSpareServers {start}\nServerLimit {n}\nMaxRequestWorkers {n}\n",
                start.min(10)
            )
        }
        ("worker" | "event", Some(n)) => {
            // MaxRequestWorkers must be a multiple of ThreadsPerChild:
            // the largest divisor of n up to Debian's 25 (80: 20 × 4).
            let per_child = (1..=n.min(25)).rev().find(|d| n % d == 0).unwrap_or(1);
            format!(
                "StartServers {}\nServerLimit {}\nThreadsPerChild {per_child}\nMinSpareThreads {per_child}\n\
                 MaxSpareThreads {}\nThreadLimit 64\nMaxRequestWorkers {n}\n",
                (n / per_child).min(3),
                n / per_child,
                3 * per_child
            )
        }
        (other, _) => bail!("no Apache MPM {other:?} (prefork, worker, event)"),
    };
    let modules = "/usr/lib/apache2/modules";
    // Apache refuses to serve as root; Debian's user then.
    let user = if rustix::process::geteuid().is_root() { "User www-data\nGroup www-data\n" } else { "" };
    let root = site.docroot.display();
    let mut c = format!(
        "# written by modus lab\nServerRoot {dir}\nDefaultRuntimeDir {dir}\nPidFile {dir}/httpd.pid\n\
         Mutex file:{dir} default\nLoadModule mpm_{mpm}_module {modules}/mod_mpm_{mpm}.so\n\
         LoadModule authz_core_module {modules}/mod_authz_core.so\nLoadModule mime_module {modules}/mod_mime.so\n\
         {user}ServerName 127.0.0.1\nListen {host}:{port}\n{sizing}MaxConnectionsPerChild 0\n\
         KeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout 5\nEnableSendfile On\nHostnameLookups Off\n\
         TypesConfig {dir}/mime.types\nErrorLog {dir}/error.log\nLogLevel warn\nDocumentRoot {root}\n\
         <Directory />\n    AllowOverride None\n    Require all denied\n</Directory>\n\
         <Directory {root}>\n    AllowOverride None\n    Options None\n    Require all granted\n</Directory>\n"
    );
    if let Some(cgi) = site.cgi {
        let module = if mpm == "prefork" { "cgi" } else { "cgid" };
        let _ = write!(
            c,
            "LoadModule alias_module {modules}/mod_alias.so\nLoadModule {module}_module {modules}/mod_{module}.so\n\
             ScriptAlias /cgi-bin/ {cgi}/\n<Directory {cgi}>\n    AllowOverride None\n    Options +ExecCGI\n\
             Require all granted\n</Directory>\n",
            cgi = cgi.display()
        );
    }
    if let Some(log) = site.access_log {
        // mod_log_config is built into Debian's apache2.
        let _ = write!(
            c,
            "LogFormat \"%h %l %u %t \\\"%r\\\" %>s %O \\\"%{{Referer}}i\\\" \\\"%{{User-Agent}}i\\\"\" combined\n\
             CustomLog {} combined\n",
            log.display()
        );
    }
    if cached {
        let _ = write!(
            c,
            "LoadModule file_cache_module {modules}/mod_file_cache.so\n{}",
            file_cache(site.docroot)?
        );
    }
    Ok(c)
}

/// What `apache-worker-cache` caches, as modus's cache holds files under
/// paper 003's "2.0" (`--cache-size 256MiB`, the default
/// `--max-cached-file 1MiB`): files up to 16 KiB as bytes — `MMapFile`,
/// mapped at startup — and larger ones up to 1 MiB as open descriptors sent
/// with `sendfile` — `CacheFile`, opened at startup —, within 256 MiB.
///
/// Why mod_file_cache and not mod_cache (with mod_cache_socache's shmcb
/// or mod_cache_disk): paper 003's table 1 sets 1.3's "no cache" against
/// 2.0's "file cache", and credits it with shrinking the "data read" phase
/// (bringing the document into memory). Apache 2.0's module of that name
/// is mod_file_cache, the heir of 1.3's optional mod_mmap_static; Apache's
/// caching guide aims it at "improving the access time to local static
/// files which do not change very often", and its two directives are the
/// two ways modus's cache holds a file. mod_cache is an HTTP cache (RFC
/// 9111) in front of the handler: unless told otherwise a file stays fresh
/// for a tenth of its age from `Last-Modified` (`CacheLastModifiedFactor`:
/// under a second for documents made just before the run), then is
/// revalidated through the handler; shmcb takes objects up to
/// `CacheSocacheMaxSize` (100 KB by default) and copies each hit out of
/// shared memory, and mod_cache_disk reads the disk again — caching what
/// an HTTP response was, not what a file is. What mod_file_cache does not
/// do: notice a change (a file is served as it was at startup; the lab
/// writes the documents before starting the servers) or take files added
/// later (the list is the docroot's regular files at configuration time).
fn file_cache(docroot: &Path) -> Result<String> {
    const MAP_MAX: u64 = 16 << 10;
    const OPEN_MAX: u64 = 1 << 20;
    const BUDGET: u64 = 256 << 20;
    let mut files = Vec::new();
    regular_files(docroot, &mut files).with_context(|| format!("listing {}", docroot.display()))?;
    // Smallest first: a budget too small for them all holds the most files.
    files.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    // The descriptors CacheFile opens stay open in every child, beside
    // its connections: at most half of what a process may open.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(u64::MAX);
    let (mut bytes, mut open, mut text) = (0, 0, String::new());
    for (path, size) in files {
        if size > OPEN_MAX || bytes + size > BUDGET {
            break;
        }
        // A path Apache's configuration cannot quote is left uncached.
        let Some(path) = path.to_str().filter(|p| !p.contains(['"', '\\', '\n'])) else { continue };
        let directive = if size <= MAP_MAX {
            "MMapFile"
        } else if open < limit / 2 {
            open += 1;
            "CacheFile"
        } else {
            continue;
        };
        bytes += size;
        let _ = writeln!(text, "{directive} \"{path}\"");
    }
    Ok(text)
}

/// The regular files under `dir` (symbolic links not followed), with their sizes.
fn regular_files(dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            regular_files(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push((entry.path(), entry.metadata()?.len()));
        }
    }
    Ok(())
}

/// Files a configuration refers to, written beside it (Apache's `mime.types`).
pub fn prepare(peer: &str, dir: &Path) -> Result<()> {
    if peer.starts_with("apache-") {
        std::fs::write(
            dir.join("mime.types"),
            "text/html html htm\ntext/plain txt\ntext/css css\nimage/svg+xml svg\napplication/octet-stream bin\n",
        )?;
    }
    Ok(())
}

/// The program's own check of `conf` (`nginx -t`, `lighttpd -tt`, `h2o -t`,
/// `apache2 -t`, `haproxy -c`), in network namespace `ns` when given (some
/// bind the address they will listen on).
pub fn check(peer: &str, bin: &Path, dir: &Path, conf: &Path, ns: Option<&str>) -> Result<()> {
    let command = || match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let out = match peer {
        "nginx" | "nginx-tuned" => command().args(["-t", "-q", "-p"]).arg(dir).arg("-c").arg(conf).output(),
        "h2o" => command().arg("-t").arg("-c").arg(conf).output(),
        "haproxy" => command().args(["-c", "-q", "-f"]).arg(conf).output(),
        apache if apache.starts_with("apache-") => command().arg("-t").arg("-f").arg(conf).output(),
        _ => command().arg("-tt").arg("-f").arg(conf).output(),
    }
    .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{peer} refuses the configuration {}: {}{}",
            conf.display(),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The arguments that run `conf` in the foreground.
pub fn args(peer: &str, dir: &Path, conf: &Path) -> Vec<std::ffi::OsString> {
    match peer {
        "nginx" | "nginx-tuned" => vec!["-p".into(), dir.into(), "-c".into(), conf.into()],
        "h2o" => vec!["-c".into(), conf.into()],
        "haproxy" => vec!["-db".into(), "-f".into(), conf.into()],
        apache if apache.starts_with("apache-") => vec!["-f".into(), conf.into(), "-DFOREGROUND".into()],
        _ => vec!["-D".into(), "-f".into(), conf.into()],
    }
}

/// HAProxy in front of `backends` on `host`:`port`: one process, one
/// thread, keep-alive on both sides, least-connections balancing; `extra`
/// lines go into the backend section (`default-server maxconn 16` and
/// `timeout queue 20ms` make it admit as `modus direct --max-backend-conns
/// 16 --queue-timeout 20ms` does).
pub fn haproxy_config(dir: &Path, host: &str, port: u16, backends: &[String], extra: &[String]) -> String {
    // Two descriptors per connection (client and server side), within the
    // descriptors HAProxy may raise its limit to.
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum.unwrap_or(u64::MAX);
    let maxconn = (hard.saturating_sub(64) / 2).clamp(256, 10_000);
    let mut c = format!(
        "# written by modus lab\nglobal\n    maxconn {maxconn}\n    nbthread 1\n    pidfile {dir}/haproxy.pid\n\
         defaults\n    mode http\n    timeout connect 1s\n    timeout client 30s\n    timeout server 30s\n\
         timeout queue 2s\n    timeout http-keep-alive 5s\n    option http-keep-alive\n\
         frontend lab\n    bind {host}:{port}\n    maxconn {maxconn}\n    default_backend servers\n\
         backend servers\n    balance leastconn\n    http-reuse always\n",
        dir = dir.display()
    );
    for line in extra {
        let _ = writeln!(c, "    {line}");
    }
    for (i, b) in backends.iter().enumerate() {
        let _ = writeln!(c, "    server b{} {b}", i + 1);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each configuration passes the peer's own check where it is installed.
    #[test]
    fn configurations_pass_the_peers_own_check() {
        let dir = tempfile::tempdir().unwrap();
        let docroot = dir.path().join("root");
        let cgi = dir.path().join("cgi-bin");
        let log = dir.path().join("access.log");
        std::fs::create_dir_all(docroot.join("sub")).unwrap();
        std::fs::create_dir_all(&cgi).unwrap();
        // Kept as bytes, as a descriptor, and not at all by apache-worker-cache.
        for (name, size) in [("small.html", 500), ("sub/mid.bin", 50_000), ("big.bin", 2 << 20)] {
            std::fs::write(docroot.join(name), vec![b'x'; size]).unwrap();
        }
        for peer in PEERS {
            for site in [
                Site { docroot: &docroot, cgi: None, max_clients: None, access_log: Some(&log) },
                Site { docroot: &docroot, cgi: Some(&cgi), max_clients: Some(80), access_log: None },
            ] {
                if site.cgi.is_some() && !runs_cgi(peer) {
                    continue;
                }
                let work = dir.path().join(format!("{peer}-{}", site.cgi.is_some()));
                std::fs::create_dir_all(&work).unwrap();
                let text = config(peer, &work, site, "127.0.0.1", 18999).unwrap();
                assert!(text.contains("18999") && text.contains(&docroot.display().to_string()), "{text}");
                if site.cgi.is_some() {
                    assert!(text.contains(&cgi.display().to_string()), "{text}");
                }
                if peer.starts_with("apache-") && site.max_clients.is_some() {
                    assert!(text.contains("MaxRequestWorkers 80\n"), "paper 001's MaxClients 80: {text}");
                }
                // Logging on (paper 003): to the file, or not at all.
                assert_eq!(text.contains(&log.display().to_string()), site.access_log.is_some(), "{text}");
                let root = docroot.display();
                if peer == "apache-worker-cache" {
                    assert!(
                        text.contains("mpm_worker_module") && text.contains("file_cache_module"),
                        "{text}"
                    );
                    assert!(text.contains(&format!("MMapFile \"{root}/small.html\"\n")), "{text}");
                    assert!(text.contains(&format!("CacheFile \"{root}/sub/mid.bin\"\n")), "{text}");
                    assert!(!text.contains("big.bin"), "past 1 MiB, served from the file: {text}");
                } else if peer == "nginx-tuned" {
                    assert!(text.contains("open_file_cache max="), "{text}");
                    assert_eq!(text.contains("combined buffer=64k"), site.access_log.is_some(), "{text}");
                } else {
                    assert!(!text.to_lowercase().contains("cache"), "{peer} caches nothing: {text}");
                }
                let Some(bin) = binary(peer) else {
                    eprintln!(
                        "skipped: {peer} is not installed (apt-get install {}); its config was not checked",
                        program(peer)
                    );
                    continue;
                };
                prepare(peer, &work).unwrap();
                let conf = work.join(format!("{peer}.conf"));
                std::fs::write(&conf, text).unwrap();
                check(peer, &bin, &work, &conf, None).unwrap_or_else(|e| panic!("{e:#}"));
            }
        }
        let docroot_only = Site { docroot: &docroot, cgi: None, max_clients: None, access_log: None };
        assert!(config("caddy", dir.path(), docroot_only, "127.0.0.1", 1).is_err());
        assert!(config("apache-perchild", dir.path(), docroot_only, "127.0.0.1", 1).is_err());
    }

    #[test]
    fn the_haproxy_configuration_passes_haproxy_c() {
        let dir = tempfile::tempdir().unwrap();
        let backends = ["127.0.0.1:18001".to_string(), "127.0.0.1:18002".to_string()];
        let extra = ["default-server maxconn 16".to_string(), "timeout queue 20ms".to_string()];
        let text = haproxy_config(dir.path(), "127.0.0.1", 18999, &backends, &extra);
        assert!(
            text.contains("bind 127.0.0.1:18999") && text.contains("server b2 127.0.0.1:18002"),
            "{text}"
        );
        let Some(bin) = binary("haproxy") else {
            eprintln!(
                "skipped: haproxy is not installed (apt-get install haproxy); its config was not checked"
            );
            return;
        };
        let conf = dir.path().join("haproxy.cfg");
        std::fs::write(&conf, &text).unwrap();
        check("haproxy", &bin, dir.path(), &conf, None).unwrap_or_else(|e| panic!("{e:#}"));
        std::fs::write(&conf, text.replace("balance leastconn", "balance nowhere")).unwrap();
        assert!(check("haproxy", &bin, dir.path(), &conf, None).is_err(), "a bad configuration is refused");
    }
}

//! `modus direct` options and their checked form, [`Config`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::Args;
pub use units::{Dur, Size};

/// `modus direct` options.
#[derive(Args, Debug, Clone)]
pub struct DirectOptions {
    /// Address to listen on: HOST:PORT, :PORT (every interface) or PORT (on 127.0.0.1);
    /// port 0 picks a free one, printed on start [default: 127.0.0.1:8000]
    #[arg(short, long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Take clients over HTTPS on ADDR instead of HTTP on --listen (TLS ends
    /// here; backends get plain HTTP with X-Forwarded-Proto: https)
    #[arg(long, value_name = "ADDR", help_heading = "TLS")]
    pub tls_listen: Option<String>,

    /// Certificate chain, PEM; repeat with --tls-key for more names (chosen by SNI)
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub tls_cert: Vec<PathBuf>,

    /// Private key of the --tls-cert at the same position, PEM
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub tls_key: Vec<PathBuf>,

    /// A throw-away self-signed certificate for localhost, to try HTTPS
    #[arg(long, help_heading = "TLS")]
    pub tls_self_signed: bool,

    /// A backend web server (repeat for several)
    #[arg(short, long = "backend", required = true, value_name = "ADDR")]
    pub backends: Vec<String>,

    /// Keep-alive connections kept open to each backend, ready for requests
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub backend_conns: usize,

    /// Most requests in flight per backend (HAProxy's per-server maxconn)
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub max_backend_conns: usize,

    /// Most requests waiting for a backend; beyond, the busy page at once
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub queue: usize,

    /// Longest wait in the pending queue before the busy page
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub queue_timeout: Dur,

    /// The pending queue's order: srpt serves first the request whose
    /// target answered the fewest bytes last time (a flood of large
    /// downloads waits behind small requests), fifo as they came
    #[arg(long, default_value = "srpt", value_name = "fifo|srpt")]
    pub queue_order: QueueOrder,

    /// HTML page sent with 503 when a request cannot be admitted
    #[arg(long, value_name = "FILE")]
    pub busy_page: Option<PathBuf>,

    /// Seconds in the busy page's Retry-After
    #[arg(long, default_value_t = 1, value_name = "SECONDS")]
    pub retry_after: u32,

    /// Most open client connections per client IP (0: no limit); 429 beyond
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_conns_per_ip: usize,

    /// Most open client connections in total; 503 beyond
    #[arg(long, default_value_t = 20000, value_name = "N")]
    pub max_conns: usize,

    /// Time allowed to receive a whole request head; 408 after
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub header_timeout: Dur,

    /// Idle time before a client's keep-alive connection is closed
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub keepalive_timeout: Dur,

    /// A client or backend transfer making no progress this long is aborted
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub send_timeout: Dur,

    /// Time a backend may take to start its response; 504 after
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub backend_timeout: Dur,

    /// Time a connection to a backend may take to open
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub connect_timeout: Dur,

    /// Time between active health checks: a `--health-path` request to
    /// every backend, or else a connection attempt to a backend that is out
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub health_interval: Dur,

    /// Path of an HTTP health check (GET, must answer 2xx or 3xx) sent to
    /// every backend each `--health-interval`; without it, down backends
    /// get a connection attempt only
    #[arg(long, value_name = "PATH")]
    pub health_path: Option<String>,

    /// Time a health check may take (the check fails after it)
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    pub health_timeout: Dur,

    /// Passive health: at least this many failures (502/504 responses,
    /// timeouts, failed connections, broken responses) within
    /// `--fail-window`, and at least half of its exchanges, take a backend
    /// out until a health check passes (0: off)
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub max_fails: usize,

    /// The sliding window of `--max-fails`
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub fail_window: Dur,

    /// Adaptive concurrency limit from the director's own latency and
    /// error measurements: off, aimd, gradient (see README)
    #[arg(long, default_value = "aimd", value_name = "MODE")]
    pub adaptive: crate::backend::Adaptive,

    /// A request body making no progress this long while being forwarded
    /// is abandoned (408), so a slow upload cannot hold a backend slot
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub body_timeout: Dur,

    /// Admin listener serving /status, /status.json and /metrics (off by
    /// default; keep it on loopback)
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,

    /// Largest request body; 413 beyond
    #[arg(long, default_value = "1GiB", value_name = "SIZE")]
    pub max_body: Size,

    /// Most of one response kept in a temp file for a client that reads
    /// slower than its backend sends (beyond 64 KiB in memory), so the
    /// backend connection is free once the backend is done; past it, the
    /// rest goes at the client's pace (nginx's proxy_max_temp_file_size;
    /// 0: no buffering, every response at the client's pace)
    #[arg(long, default_value = "1GiB", value_name = "SIZE")]
    pub max_buffered_response: Size,

    /// Most of one request body read from the client before it goes to a
    /// backend (beyond 64 KiB in memory, in a temp file), so a slow upload
    /// holds no backend slot (nginx's proxy_request_buffering); a longer
    /// body is streamed under --body-timeout (0: stream every body past
    /// 64 KiB)
    #[arg(long, default_value = "1GiB", value_name = "SIZE")]
    pub max_buffered_request: Size,

    /// Where backend monitors (`modus monitor`) connect; without it, no
    /// monitoring
    #[arg(long, value_name = "ADDR")]
    pub monitor_listen: Option<String>,

    /// Answer this path with the director's status (text) instead of
    /// forwarding it
    #[arg(long, value_name = "PATH")]
    pub status_path: Option<String>,

    /// On SIGTERM/SIGINT, time given to requests in flight
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub shutdown_timeout: Dur,
}

/// The default busy page.
pub const DEFAULT_BUSY_PAGE: &str =
    "<!doctype html>\n<html><head><title>503 Service Unavailable</title></head>\n\
<body><h1>Busy</h1><p>The server is busy right now. Please try again in a moment.</p></body></html>\n";

/// Checked options.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// `--tls-listen`: clients speak TLS, ended here.
    pub tls: Option<transport::tls::ServerTls>,
    /// Backends, by the name given on the command line, and address.
    pub backends: Vec<(String, SocketAddr)>,
    /// Pre-opened connections per backend.
    pub backend_conns: usize,
    /// Most requests in flight per backend.
    pub max_backend_conns: usize,
    /// Pending queue capacity.
    pub queue: usize,
    /// Pending queue wait limit.
    pub queue_timeout: Duration,
    /// Pending queue order.
    pub queue_order: QueueOrder,
    /// Busy page body.
    pub busy_page: Vec<u8>,
    /// Retry-After seconds.
    pub retry_after: u32,
    /// Per-IP connection cap (0: none).
    pub max_conns_per_ip: usize,
    /// Total client connection cap.
    pub max_conns: usize,
    /// Request head deadline.
    pub header_timeout: Duration,
    /// Keep-alive idle timeout.
    pub keepalive_timeout: Duration,
    /// Transfer progress timeout.
    pub send_timeout: Duration,
    /// Backend first-byte timeout.
    pub backend_timeout: Duration,
    /// Backend connect timeout.
    pub connect_timeout: Duration,
    /// Health check period.
    pub health_interval: Duration,
    /// HTTP health check path.
    pub health_path: Option<String>,
    /// Health check deadline.
    pub health_timeout: Duration,
    /// Passive health threshold (0: off).
    pub max_fails: usize,
    /// Passive health window.
    pub fail_window: Duration,
    /// Adaptive limiter.
    pub adaptive: crate::backend::Adaptive,
    /// Request body progress timeout.
    pub body_timeout: Duration,
    /// Admin listener.
    pub admin: Option<SocketAddr>,
    /// Request body limit.
    pub max_body: u64,
    /// Most bytes of one response in its temp file (0: no buffering).
    pub max_buffered_response: u64,
    /// Most bytes of one request body in its temp file before admission.
    pub max_buffered_request: u64,
    /// Monitor listener.
    pub monitor_listen: Option<SocketAddr>,
    /// Status path.
    pub status_path: Option<String>,
    /// Grace period at stop.
    pub shutdown_timeout: Duration,
    /// Request head limits (those of `modus serve`).
    pub limits: h1::Limits,
}

/// An address flag's value as typed (`8000`, `:8000`, `HOST:PORT`), resolved.
pub fn resolve(what: &str, typed: &str) -> anyhow::Result<SocketAddr> {
    let addr = units::listen_addr(typed).map_err(|e| anyhow!("{what}: {e}"))?;
    addr.to_socket_addrs()
        .with_context(|| format!("{what} {addr:?}"))?
        .next()
        .ok_or_else(|| anyhow!("{what} {addr:?} resolves to no address"))
}

impl DirectOptions {
    /// Checks the options and reads the busy page.
    pub fn config(&self) -> anyhow::Result<Config> {
        let listen = match (&self.listen, &self.tls_listen) {
            (Some(plain), Some(_)) => bail!(
                "--listen {plain} and --tls-listen: the director takes clients on one listener, \
                 HTTP or HTTPS; drop --listen to take them over HTTPS only"
            ),
            (None, Some(addr)) => resolve("--tls-listen", addr)?,
            (plain, None) => resolve("--listen", plain.as_deref().unwrap_or("127.0.0.1:8000"))?,
        };
        let certs = transport::tls::CertSource::from_flags(
            self.tls_listen.is_some(),
            self.tls_cert.clone(),
            self.tls_key.clone(),
            self.tls_self_signed,
        )
        .map_err(|e| anyhow!(e))?;
        let tls = certs.map(transport::tls::ServerTls::new).transpose().map_err(|e| anyhow!(e))?;
        let mut backends = Vec::new();
        for b in &self.backends {
            let addr = resolve("--backend", b)?;
            if backends.iter().any(|(_, a)| *a == addr) {
                bail!("--backend {b} is given twice");
            }
            backends.push((b.clone(), addr));
        }
        if self.max_backend_conns == 0 {
            bail!("--max-backend-conns must be at least 1");
        }
        let busy_page = match &self.busy_page {
            Some(path) => std::fs::read(path).with_context(|| format!("--busy-page {}", path.display()))?,
            None => DEFAULT_BUSY_PAGE.as_bytes().to_vec(),
        };
        let monitor_listen =
            self.monitor_listen.as_deref().map(|a| resolve("--monitor-listen", a)).transpose()?;
        for (flag, path) in [("--status-path", &self.status_path), ("--health-path", &self.health_path)] {
            if let Some(path) = path {
                if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    bail!("{flag} must start with / and contain no spaces or control characters");
                }
            }
        }
        let admin = self.admin.as_deref().map(|a| resolve("--admin", a)).transpose()?;
        Ok(Config {
            listen,
            tls,
            backends,
            backend_conns: self.backend_conns,
            max_backend_conns: self.max_backend_conns,
            queue: self.queue,
            queue_timeout: self.queue_timeout.0,
            queue_order: self.queue_order,
            busy_page,
            retry_after: self.retry_after,
            max_conns_per_ip: self.max_conns_per_ip,
            max_conns: self.max_conns.max(1),
            header_timeout: self.header_timeout.0,
            keepalive_timeout: self.keepalive_timeout.0,
            send_timeout: self.send_timeout.0,
            backend_timeout: self.backend_timeout.0,
            connect_timeout: self.connect_timeout.0,
            health_interval: self.health_interval.0.max(Duration::from_millis(10)),
            health_path: self.health_path.clone(),
            health_timeout: self.health_timeout.0.max(Duration::from_millis(1)),
            max_fails: self.max_fails,
            fail_window: self.fail_window.0,
            adaptive: self.adaptive,
            body_timeout: self.body_timeout.0.max(Duration::from_millis(1)),
            admin,
            max_body: self.max_body.0,
            max_buffered_response: self.max_buffered_response.0,
            max_buffered_request: self.max_buffered_request.0,
            monitor_listen,
            status_path: self.status_path.clone(),
            shutdown_timeout: self.shutdown_timeout.0,
            limits: h1::Limits::default(),
        })
    }
}

/// The configuration `modus direct` would make of `args` (its options
/// alone, without the command name), for tests.
#[cfg(test)]
pub(crate) fn config_of(args: &[&str]) -> Config {
    use clap::Parser;
    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        options: DirectOptions,
    }
    let args = std::iter::once("direct").chain(args.iter().copied());
    Command::parse_from(args).options.config().expect("a valid configuration")
}

/// `--queue-order`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    /// First come, first served.
    Fifo,
    /// Fewest expected response bytes first.
    Srpt,
}

impl FromStr for QueueOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<QueueOrder, String> {
        match s {
            "fifo" => Ok(QueueOrder::Fifo),
            "srpt" => Ok(QueueOrder::Srpt),
            _ => Err(format!("{s:?}: expected fifo or srpt")),
        }
    }
}

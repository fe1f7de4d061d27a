use std::time::Duration;

/// Everything the request core can be told; the server fills it from flags
/// and the config file. Defaults follow nginx/Apache (see the notes in each field).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Request-head limits (414/431).
    pub limits: h1::Limits,
    /// Largest request body accepted (413 beyond); nginx's `client_max_body_size 1m`.
    pub max_body: u64,
    /// How long an idle keep-alive connection is kept (Apache's `KeepAliveTimeout 5`).
    pub keepalive_timeout: Duration,
    /// Total time allowed for a request head once it started (slowloris
    /// defence: a deadline, not an idle timer — mod_reqtimeout's lesson).
    pub header_timeout: Duration,
    /// A write that makes no progress for this long ends the connection (nginx `send_timeout 60s`).
    pub send_timeout: Duration,
    /// How long to drain input after an error before closing (lingering close, RFC 9112 §9.6).
    pub linger_timeout: Duration,
    /// Requests served on one connection before it is closed (nginx `keepalive_requests 1000`).
    pub max_keepalive_requests: u32,
    /// Byte budget of the in-memory file cache.
    pub cache_size: u64,
    /// Files larger than this are never cached and go out with `sendfile`.
    pub max_cached_file: u64,
    /// Cached files up to this size are held as bytes, larger ones as open
    /// descriptors: [`INLINE_MAX_SENDFILE`](crate::INLINE_MAX_SENDFILE) where
    /// responses go out with `sendfile`, [`INLINE_MAX_COPY`](crate::INLINE_MAX_COPY)
    /// where a file would be read to be sent (TLS, `uring`).
    pub inline_max: u64,
    /// More ranges than this in one request are answered with the whole file (Apache `MaxRanges 200`).
    pub max_ranges: usize,
    /// HTML listings for directories without `index.html`.
    pub browse: bool,
    /// Follow symlinks that leave the document root.
    pub follow_symlinks: bool,
    /// The `Server` header value.
    pub server_name: String,
    /// CGI (RFC 3875); `None`: off (the default).
    pub cgi: Option<crate::CgiSettings>,
    /// The order responses compete for the link in (`--schedule`).
    pub schedule: crate::schedule::Schedule,
    /// `Cache-Control` of the site's files, by path (`--cache-control`).
    pub cache_control: crate::cache_control::CacheControl,
    /// Content codings of the site's files (`--compress`, `--precompressed`).
    pub compression: crate::compress::Compression,
    /// The site's own pages for error statuses (`--error-page`).
    pub error_pages: crate::error_pages::ErrorPages,
    /// How long a TLS handshake may take, from the accept (nginx's
    /// `ssl_handshake_timeout`); the head's own deadline starts after it.
    pub tls_handshake_timeout: Duration,
    /// `Strict-Transport-Security` on every response (`--hsts`; only over TLS).
    pub hsts: Option<Box<str>>,
    /// Most open connections from one client address (`--max-conns-per-ip`;
    /// 0: no cap); 429 beyond, as the director answers.
    pub max_conns_per_ip: usize,
    /// The slowest a client may send a head or body, or take a response,
    /// once `min_rate_grace` has passed (`--min-rate`, bytes per second;
    /// 0: no floor): mod_reqtimeout's `MinRate`, nginx's `send_timeout`
    /// per write, as one rule for all three.
    pub min_rate: u64,
    /// How long a head, body or response may take before `min_rate` applies.
    pub min_rate_grace: Duration,
}

impl Settings {
    /// When a transfer that began at `start` and has moved `bytes` so far
    /// falls below `--min-rate`: `start + grace + bytes / rate` (mod_reqtimeout
    /// extends its timeout by a second per `MinRate` bytes the same way);
    /// `None` without a floor.
    pub fn rate_deadline(&self, start: std::time::Instant, bytes: u64) -> Option<std::time::Instant> {
        if self.min_rate == 0 {
            return None;
        }
        let earned = Duration::from_secs_f64(bytes as f64 / self.min_rate as f64);
        Some(start + self.min_rate_grace + earned.min(Duration::from_secs(365 * 24 * 3600)))
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            limits: h1::Limits::default(),
            max_body: 1 << 20,
            keepalive_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            linger_timeout: Duration::from_secs(2),
            max_keepalive_requests: 1000,
            cache_size: 64 << 20,
            max_cached_file: 1 << 20,
            inline_max: crate::INLINE_MAX_SENDFILE,
            max_ranges: 200,
            browse: false,
            follow_symlinks: false,
            server_name: concat!("modus/", env!("CARGO_PKG_VERSION")).to_string(),
            cgi: None,
            schedule: crate::schedule::Schedule::Fifo,
            cache_control: crate::cache_control::CacheControl::default(),
            compression: crate::compress::Compression::default(),
            error_pages: crate::error_pages::ErrorPages::default(),
            tls_handshake_timeout: Duration::from_secs(10),
            hsts: None,
            max_conns_per_ip: 0,
            min_rate: 0,
            min_rate_grace: Duration::from_secs(10),
        }
    }
}

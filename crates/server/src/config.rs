//! `modus serve` options: one struct read from flags, environment and a
//! TOML file. Precedence: flag > environment > file > built-in default;
//! `--print-config` shows the result.

use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};
pub use units::{Dur, Size};

use pipeline::schedule::{self, Schedule, Srpt};

/// What `--schedule` names (see [`Schedule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleName {
    /// In the order the kernel sends them.
    Fifo,
    /// Shortest remaining bytes first.
    Srpt,
    /// `srpt`, and concurrent misses for one document read once.
    SrptGroup,
}

/// SRPT class cutoffs as typed: sizes, comma-separated, ascending.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Cutoffs(pub Vec<u64>);

impl std::str::FromStr for Cutoffs {
    type Err = String;

    fn from_str(s: &str) -> Result<Cutoffs, String> {
        let sizes = s
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| part.parse::<Size>().map(|size| size.0))
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|e| e.to_string())?;
        schedule::check_cutoffs(&sizes)?;
        Ok(Cutoffs(sizes))
    }
}

impl TryFrom<String> for Cutoffs {
    type Error = String;

    fn try_from(s: String) -> Result<Cutoffs, String> {
        s.parse()
    }
}

impl From<Cutoffs> for String {
    fn from(c: Cutoffs) -> String {
        c.0.iter().map(|&n| Size(n).to_string()).collect::<Vec<_>>().join(",")
    }
}

/// One `--cache-control` rule, checked.
fn parse_cache_rule(s: &str) -> Result<String, String> {
    pipeline::cache_control::CacheControl::parse(&[s])?;
    Ok(s.to_string())
}

/// `--compress`'s list, checked (`off` or empty: none).
fn parse_codings(s: &str) -> Result<String, String> {
    if s.trim() != "off" {
        pipeline::compress::Compression::parse_codings(s)?;
    }
    Ok(s.to_string())
}

/// One `--error-page` rule, checked.
fn parse_error_page(s: &str) -> Result<String, String> {
    pipeline::error_pages::ErrorPages::parse(&[s])?;
    Ok(s.to_string())
}

/// `--srpt-priority-base`: decimal, or hexadecimal after `0x`.
fn parse_priority(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?}: a number, e.g. 65537 or 0x10001"))
}

/// Declares [`ServeOptions`] with each option written once: its doc
/// comment is its help, its `#[arg]` its flag (and environment variable),
/// its name its config-file key, and what follows `=` its built-in default
/// (`None`: none). `defaults(options, d, t)` names, for those defaults, the
/// options being resolved (a default may depend on another option), the
/// request core's defaults and the models' ones. It writes the struct and
/// [`ServeOptions::defaults`]. The defaults are not clap's `default_value`:
/// clap would set them before the config file is layered under the flags,
/// and a file's value could then never win over a default.
macro_rules! serve_options {
    (
        defaults($options:ident, $settings:ident, $tuning:ident);
        $(#[$struct_meta:meta])*
        pub struct ServeOptions {
            $(
                $(#[$meta:meta])*
                pub $name:ident: $ty:ty = $default:expr
            ),* $(,)?
        }
    ) => {
        $(#[$struct_meta])*
        pub struct ServeOptions {
            $($(#[$meta])* pub $name: $ty,)*
        }

        impl ServeOptions {
            /// Every option's built-in default, for `options` (whose
            /// `--tls-listen` decides `--listen`'s).
            fn defaults($options: &ServeOptions) -> ServeOptions {
                let $settings = pipeline::Settings::default();
                let $tuning = models::Tuning::default();
                ServeOptions { $($name: $default),* }
            }
        }
    };
}

serve_options! {
    defaults(options, d, t);
    /// Every `serve` setting. Each is optional so the layers can be merged;
    /// [`ServeOptions::resolve`] applies the defaults.
    #[derive(Args, Clone, Debug, Default, Deserialize, Serialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    pub struct ServeOptions {
        /// Directory to serve [default: the embedded demo site]
        #[arg(value_name = "ROOT")]
        pub root: Option<PathBuf> = None,

        /// Address to listen on: HOST:PORT, :PORT (every interface) or PORT (on 127.0.0.1);
        /// port 0 picks a free one, printed on start [default: 127.0.0.1:8080]
        #[arg(short, long, env = "MODUS_LISTEN", value_name = "ADDR", help_heading = "Network")]
        pub listen: Option<String> = options.tls_listen.is_none().then(|| DEFAULT_LISTEN.into()),

        /// Port to listen on, on --listen's host: `--port 9000` is `--listen 127.0.0.1:9000`
        #[arg(short, long, env = "MODUS_PORT", value_name = "PORT", help_heading = "Network")]
        pub port: Option<u16> = None,

        /// Serve HTTPS on ADDR instead of HTTP on --listen (same forms as --listen);
        /// needs --tls-cert and --tls-key, or --tls-self-signed
        #[arg(long, env = "MODUS_TLS_LISTEN", value_name = "ADDR", help_heading = "TLS")]
        pub tls_listen: Option<String> = None,

        /// Certificate chain, PEM, the server's certificate first; repeat it
        /// (each with its --tls-key, in the same order) for more names: a
        /// client's SNI picks the one that covers it, the first is the default
        #[arg(long, value_name = "FILE", help_heading = "TLS")]
        #[serde(default, deserialize_with = "one_or_many")]
        pub tls_cert: Option<Vec<PathBuf>> = None,

        /// Private key of the --tls-cert at the same position, PEM (PKCS#8, RSA or EC)
        #[arg(long, value_name = "FILE", help_heading = "TLS")]
        #[serde(default, deserialize_with = "one_or_many")]
        pub tls_key: Option<Vec<PathBuf>> = None,

        /// OCSP response (DER) to staple for the --tls-cert at the same position,
        /// e.g. from `openssl ocsp -respout`; read again on SIGHUP
        #[arg(long, value_name = "FILE", help_heading = "TLS")]
        #[serde(default, deserialize_with = "one_or_many")]
        pub tls_ocsp: Option<Vec<PathBuf>> = None,

        /// Make a throw-away self-signed certificate for localhost at start, to
        /// try HTTPS (clients must be told to skip verification: curl -k)
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "TLS")]
        pub tls_self_signed: Option<bool> = Some(false),

        /// How long a client has to finish the TLS handshake [default: 10s]
        #[arg(long, value_name = "DURATION", help_heading = "TLS")]
        pub tls_handshake_timeout: Option<Dur> = Some(Dur(d.tls_handshake_timeout)),

        /// Send Strict-Transport-Security: max-age=DURATION with every HTTPS
        /// response (browsers then use https only, for that long), e.g. 1y
        #[arg(long, value_name = "DURATION", help_heading = "TLS")]
        pub hsts: Option<Dur> = None,

        /// Concurrency model; `modus models` describes each [default: pool]
        #[arg(short, long, env = "MODUS_MODEL", value_name = "NAME",
              value_parser = clap::builder::PossibleValuesParser::new(models::names()), help_heading = "Models")]
        pub model: Option<String> = Some("pool".into()),

        /// Worker threads [default: 128]
        #[arg(short, long, env = "MODUS_THREADS", value_name = "N", help_heading = "Models")]
        pub threads: Option<usize> = Some(t.threads),

        /// Connections with a whole request that may wait for a worker [default: 1024]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub queue: Option<usize> = Some(t.queue),

        /// Event loops, one thread each (event-driven models) [default: 1]
        #[arg(short, long, env = "MODUS_WORKERS", value_name = "N", help_heading = "Models")]
        pub workers: Option<usize> = Some(t.workers),

        /// Thread cap for per-request: beyond it requests get 503 [default: 4096]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub max_threads: Option<usize> = Some(t.max_threads),

        /// Threads per stage (staged), e.g. read=2,data=2,cgi=4,write=2,log=1
        #[arg(long, value_name = "STAGE=N,...", help_heading = "Models")]
        pub stage_threads: Option<String> = Some(t.stage_threads.clone()),

        /// Fixed number of processes (perchild) [default: 2]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub processes: Option<usize> = Some(t.processes),

        /// Fewest idle workers kept ready (prefork: processes; worker/perchild: threads) [default: 5]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub min_spare: Option<usize> = Some(t.min_spare),

        /// Most idle workers kept [default: 10]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub max_spare: Option<usize> = Some(t.max_spare),

        /// Child processes forked at start (prefork, worker; Apache's StartServers) [default: as many as --min-spare needs]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub start_servers: Option<usize> = Some(t.start_servers),

        /// Most connections served at once, all processes together (Apache MaxClients) [default: 256]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub max_clients: Option<usize> = Some(t.max_clients),

        /// Most open client connections, server-wide (event, amped, staged; the
        /// other models are bounded by their threads or processes); at the cap
        /// they stop accepting and newcomers wait in the backlog [default: 10000]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub max_connections: Option<usize> = Some(t.max_connections),

        /// event, amped: a listening socket per loop (SO_REUSEPORT; the kernel
        /// spreads connections by address hash) instead of one shared by all
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "Models")]
        pub reuseport: Option<bool> = Some(t.reuseport),

        /// Hold a new connection in the kernel until its first bytes arrive, up to
        /// this long (TCP_DEFER_ACCEPT; a silent client is accepted after it); 0 = off [default: 1s]
        #[arg(long, value_name = "DURATION", help_heading = "Network")]
        pub defer_accept: Option<Dur> = Some(Dur(DEFER_ACCEPT)),

        /// Run as USER (and GROUP, else the user's own) once the ports are
        /// bound and the logs opened, as nginx's `user`: needs root; files are
        /// then served with that user's rights, scripts run as it
        #[arg(long, value_name = "USER[:GROUP]", help_heading = "Network")]
        pub user: Option<String> = None,

        /// Threads per child process (worker; upper bound for perchild) [default: 25]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub threads_per_child: Option<usize> = Some(t.threads_per_child),

        /// Helper threads for blocking disk work (amped) [default: 4]
        #[arg(long, value_name = "N", help_heading = "Models")]
        pub helpers: Option<usize> = Some(t.helpers),

        /// Run CGI scripts: executable files in DIR, under --cgi-prefix [default: off;
        /// with no ROOT, the demo programs spin, echo and env built into modus]
        #[arg(long, value_name = "DIR", help_heading = "CGI")]
        pub cgi_dir: Option<PathBuf> = None,

        /// URL prefix of CGI scripts [default: /cgi-bin/]
        #[arg(long, value_name = "PATH", help_heading = "CGI")]
        pub cgi_prefix: Option<String> = Some(pipeline::CgiSettings::PREFIX.into()),

        /// A CGI script making no progress this long is killed (504 if nothing was sent yet) [default: 60s]
        #[arg(long, value_name = "DURATION", help_heading = "CGI")]
        pub cgi_timeout: Option<Dur> = Some(Dur(pipeline::CgiSettings::TIMEOUT)),

        /// Most CGI scripts running at once, per process; 503 beyond [default: 256]
        #[arg(long, value_name = "N", help_heading = "CGI")]
        pub max_cgi: Option<usize> = Some(pipeline::CgiSettings::MAX_RUNNING),

        /// PATH given to CGI scripts (their environment is otherwise only the request's)
        /// [default: /usr/local/bin:/usr/bin:/bin]
        #[arg(long, value_name = "DIRS", help_heading = "CGI")]
        pub cgi_path: Option<String> = Some(pipeline::CgiSettings::PATH.into()),

        /// Serve /status, /status.json and /metrics on ADDR (off by default; use loopback)
        #[arg(long, value_name = "ADDR", help_heading = "Logging and metrics")]
        pub admin: Option<String> = None,

        /// Take no per-phase timestamps (counters stay on)
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "Logging and metrics")]
        pub no_timing: Option<bool> = Some(false),

        /// Write one CSV row per sampled request to FILE (see --trace-sample)
        #[arg(long, value_name = "FILE", help_heading = "Logging and metrics")]
        pub trace: Option<PathBuf> = None,

        /// Fraction of requests written to --trace [default: 0.01]
        #[arg(long, value_name = "FRACTION", help_heading = "Logging and metrics")]
        pub trace_sample: Option<f64> = Some(0.01),

        /// TOML file with any of these options (keys are the long flag names)
        #[arg(short, long, env = "MODUS_CONFIG", value_name = "FILE", help_heading = "Configuration")]
        #[serde(skip)]
        pub config: Option<PathBuf> = None,

        /// Access log: a file, `-` for stdout, or `off` [default: -]
        #[arg(long, env = "MODUS_ACCESS_LOG", value_name = "PATH|-|off", help_heading = "Logging and metrics")]
        pub access_log: Option<String> = Some("-".into()),

        /// Error log: a file, or `-` for stderr [default: -]
        #[arg(long, value_name = "PATH|-", help_heading = "Logging and metrics")]
        pub error_log: Option<String> = Some("-".into()),

        /// Idle time before a keep-alive connection is closed [default: 5s]
        #[arg(long, value_name = "DURATION", help_heading = "Limits and timeouts")]
        pub keepalive_timeout: Option<Dur> = Some(Dur(d.keepalive_timeout)),

        /// Time allowed to receive a whole request head; 408 after [default: 10s]
        #[arg(long, value_name = "DURATION", help_heading = "Limits and timeouts")]
        pub header_timeout: Option<Dur> = Some(Dur(d.header_timeout)),

        /// A response write making no progress this long ends the connection [default: 60s]
        #[arg(long, value_name = "DURATION", help_heading = "Limits and timeouts")]
        pub send_timeout: Option<Dur> = Some(Dur(d.send_timeout)),

        /// Most open connections from one client address; 429 beyond (0: no cap) [default: 0]
        #[arg(long, value_name = "N", help_heading = "Limits and timeouts")]
        pub max_conns_per_ip: Option<usize> = Some(d.max_conns_per_ip),

        /// The slowest a client may send a request head or body, or read a
        /// response, once --min-rate-grace has passed: cut below it (408 if
        /// nothing was answered yet) (0: no floor) [default: 0]
        #[arg(long, value_name = "BYTES/S", help_heading = "Limits and timeouts")]
        pub min_rate: Option<Size> = Some(Size(d.min_rate)),

        /// How long a head, body or response may take before --min-rate applies [default: 10s]
        #[arg(long, value_name = "DURATION", help_heading = "Limits and timeouts")]
        pub min_rate_grace: Option<Dur> = Some(Dur(d.min_rate_grace)),

        /// On SIGTERM/SIGINT, time given to in-flight requests [default: 10s]
        #[arg(long, value_name = "DURATION", help_heading = "Limits and timeouts")]
        pub shutdown_timeout: Option<Dur> = Some(Dur(t.shutdown_timeout)),

        /// Requests per keep-alive connection [default: 1000]
        #[arg(long, value_name = "N", help_heading = "Limits and timeouts")]
        pub max_keepalive_requests: Option<u32> = Some(d.max_keepalive_requests),

        /// Longest request line; 414 beyond [default: 8192]
        #[arg(long, value_name = "BYTES", help_heading = "Limits and timeouts")]
        pub max_request_line: Option<usize> = Some(d.limits.max_request_line),

        /// Largest request head; 431 beyond [default: 32768]
        #[arg(long, value_name = "BYTES", help_heading = "Limits and timeouts")]
        pub max_header_bytes: Option<usize> = Some(d.limits.max_header_bytes),

        /// Most header fields in a request; 431 beyond [default: 100]
        #[arg(long, value_name = "N", help_heading = "Limits and timeouts")]
        pub max_headers: Option<usize> = Some(d.limits.max_headers),

        /// Largest request body; 413 beyond [default: 1MiB]
        #[arg(long, value_name = "SIZE", help_heading = "Limits and timeouts")]
        pub max_body: Option<Size> = Some(Size(d.max_body)),

        /// Memory for cached files [default: 64MiB]
        #[arg(long, value_name = "SIZE", help_heading = "Files")]
        pub cache_size: Option<Size> = Some(Size(d.cache_size)),

        /// Larger files are not cached but sent with sendfile [default: 1MiB]
        #[arg(long, value_name = "SIZE", help_heading = "Files")]
        pub max_cached_file: Option<Size> = Some(Size(d.max_cached_file)),

        /// More ranges than this are answered with the whole file [default: 200]
        #[arg(long, value_name = "N", help_heading = "Files")]
        pub max_ranges: Option<usize> = Some(d.max_ranges),

        /// List directories that have no index.html
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "Files")]
        pub browse: Option<bool> = Some(d.browse),

        /// Follow symlinks that lead out of ROOT
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "Files")]
        pub follow_symlinks: Option<bool> = Some(d.follow_symlinks),

        /// Cache-Control for files whose path matches PATTERN (`*.css`, or
        /// `/static/*` with a slash: the whole path); repeat it, the first
        /// match wins; HTTP/1.0 clients also get Expires from max-age
        #[arg(long, value_name = "PATTERN=VALUE", value_parser = parse_cache_rule, help_heading = "Files")]
        #[serde(default, deserialize_with = "one_or_many")]
        pub cache_control: Option<Vec<String>> = None,

        /// Send compressible files encoded, in the first of these codings the
        /// client accepts (br, zstd, gzip; Accept-Encoding's q-values first,
        /// then this order); a cached file is encoded once per coding and kept
        /// in the cache; larger files are sent as they are [default: off]
        #[arg(long, value_name = "br,zstd,gzip", value_parser = parse_codings, help_heading = "Files")]
        pub compress: Option<String> = None,

        /// Media types --compress and --precompressed encode: `text/*`,
        /// `application/json`, `*+xml` [default: text/*,application/javascript,
        /// application/json,application/xml,application/wasm,image/svg+xml,*+json,*+xml]
        #[arg(long, value_name = "TYPE,...", help_heading = "Files")]
        pub compress_types: Option<String> = Some(d.compression.types.join(",")),

        /// Smaller files are not encoded by --compress [default: 512]
        #[arg(long, value_name = "SIZE", help_heading = "Files")]
        pub compress_min_size: Option<Size> = Some(Size(d.compression.min_size)),

        /// Serve FILE.br, FILE.zst or FILE.gz in place of FILE (of a --compress-types
        /// type) to a client that accepts the coding, when present and not older than FILE (to the second)
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = "Files")]
        pub precompressed: Option<bool> = Some(d.compression.precompressed),

        /// The site's page for an error status, e.g. 404=/errors/404.html, sent
        /// with that status (the built-in page if it cannot be); repeat it
        #[arg(long, value_name = "STATUS=PATH", value_parser = parse_error_page, help_heading = "Files")]
        #[serde(default, deserialize_with = "one_or_many")]
        pub error_page: Option<Vec<String>> = None,

        /// The order responses compete for the outgoing link: fifo, or srpt —
        /// the socket's priority follows the class of the bytes a response has
        /// left (needs a priority qdisc: README, "Scheduling the outgoing link");
        /// srpt-group also reads a document once for all the requests that miss
        /// on it together, and an event loop sends one file's responses back to
        /// back [default: fifo]
        #[arg(long, value_name = "fifo|srpt|srpt-group", help_heading = "Scheduling")]
        pub schedule: Option<ScheduleName> = Some(ScheduleName::Fifo),

        /// SRPT's class cutoffs, ascending, at most 7 (8 classes)
        /// [default: 5KiB,13KiB,36KiB,130KiB,222KiB,803KiB,6MiB]
        #[arg(long, value_name = "SIZE,...", help_heading = "Scheduling")]
        pub srpt_classes: Option<Cutoffs> = Some(Cutoffs(Srpt::CUTOFFS.to_vec())),

        /// A response writing this long is served at the top class: SRPT's
        /// bound on starvation [default: 2s]
        #[arg(long, value_name = "DURATION", help_heading = "Scheduling")]
        pub srpt_max_wait: Option<Dur> = Some(Dur(Srpt::MAX_WAIT)),

        /// SO_PRIORITY of class 0; class k gets BASE + k (65537 = htb class 1:1)
        /// [default: 65537]
        #[arg(long, value_name = "N", value_parser = parse_priority, help_heading = "Scheduling")]
        pub srpt_priority_base: Option<u32> = Some(Srpt::PRIORITY_BASE),

        /// Unsent bytes SRPT lets the kernel hold per socket (TCP_NOTSENT_LOWAT),
        /// so a class change reaches the link soon; 0 leaves the kernel's
        /// default [default: 16KiB]
        #[arg(long, value_name = "SIZE", help_heading = "Scheduling")]
        pub srpt_unsent_limit: Option<Size> = Some(Size(u64::from(Srpt::UNSENT_LIMIT))),

        /// Check the configuration and exit (0 if valid, 2 if not)
        #[arg(long, help_heading = "Configuration")]
        #[serde(skip)]
        pub check: bool = false,

        /// Print the effective configuration as TOML and exit
        #[arg(long, help_heading = "Configuration")]
        #[serde(skip)]
        pub print_config: bool = false,
    }
}

/// A list key of the config file, written as a list or as one string
/// (`error-page = "404=/errors/404.html"`), as a repeated flag may be
/// given once.
fn one_or_many<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Visitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Vec<T>, E> {
            let one = T::deserialize(serde::de::value::StrDeserializer::<E>::new(s))?;
            Ok(vec![one])
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut all = Vec::new();
            while let Some(item) = seq.next_element()? {
                all.push(item);
            }
            Ok(all)
        }
    }
    d.deserialize_any(Visitor(std::marker::PhantomData)).map(Some)
}

/// Reads a configuration file's text; an unknown key gets a hint: the
/// flag spelling of a key written with underscores, or the nearest key.
pub fn from_toml(text: &str) -> Result<ServeOptions, String> {
    toml::from_str::<ServeOptions>(text).map_err(|e| {
        let message = e.message().to_string();
        let Some(key) = message.strip_prefix("unknown field `").and_then(|m| m.split('`').next()) else {
            return e.to_string();
        };
        let known: Vec<&str> = message
            .split_once("expected one of ")
            .map(|(_, list)| list.split(", ").map(|k| k.trim_matches('`')).collect())
            .unwrap_or_default();
        let hint = match units::closest(&key.replace('_', "-"), known.iter().copied()) {
            Some(k) if k == key.replace('_', "-") => format!("use `{k}` (keys are the long flag names)"),
            Some(k) => format!("did you mean `{k}`?"),
            None => "the keys are the long flag names of `modus serve --help`".to_string(),
        };
        let line = e.span().map(|span| text[..span.start].matches('\n').count() + 1);
        let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
        format!("unknown key `{key}`{at}: {hint}")
    })
}

impl ServeOptions {
    /// Fills the options not set here from `lower` (a config file, or the
    /// defaults). Works on the serialised form, where unset options are
    /// absent, so a new option needs no change here.
    pub fn layer_over(&mut self, lower: ServeOptions) {
        let mut merged = toml::Table::try_from(&lower).expect("options serialise");
        merged.extend(toml::Table::try_from(&*self).expect("options serialise"));
        let layered: ServeOptions = merged.try_into().expect("options round-trip");
        let ServeOptions { config, check, print_config, .. } = std::mem::take(self);
        *self = ServeOptions { config, check, print_config, ..layered };
    }

    /// Applies the defaults.
    pub fn resolve(mut self) -> ServeOptions {
        let defaults = ServeOptions::defaults(&self);
        self.layer_over(defaults);
        // As typed (`8080`, `:8080`, a port of its own): one HOST:PORT form.
        // An address that does not parse is left for `Server::prepare` to
        // refuse. --port is the plain listener's port: beside --tls-listen,
        // the one that redirects to HTTPS (on --listen's host, else the
        // default's).
        if let (Some(_), Some(_), None) = (self.port, &self.tls_listen, &self.listen) {
            self.listen = Some(DEFAULT_LISTEN.to_string());
        }
        if let Some(listen) = self.listen.as_deref() {
            let typed = match self.port {
                Some(port) => units::with_port(listen, port),
                None => units::listen_addr(listen),
            };
            if let Ok(addr) = typed {
                self.listen = Some(addr);
            }
        }
        if let Some(Ok(addr)) = self.tls_listen.as_deref().map(units::listen_addr) {
            self.tls_listen = Some(addr);
        }
        self
    }

    /// The models' knobs (call after [`resolve`](Self::resolve)).
    pub fn tuning(&self) -> models::Tuning {
        models::Tuning {
            threads: resolved(&self.threads),
            queue: resolved(&self.queue),
            workers: resolved(&self.workers),
            helpers: resolved(&self.helpers),
            max_threads: resolved(&self.max_threads),
            stage_threads: resolved(&self.stage_threads),
            processes: resolved(&self.processes),
            min_spare: resolved(&self.min_spare),
            max_spare: resolved(&self.max_spare),
            start_servers: resolved(&self.start_servers),
            max_clients: resolved(&self.max_clients),
            threads_per_child: resolved(&self.threads_per_child),
            max_connections: resolved(&self.max_connections),
            reuseport: resolved(&self.reuseport),
            shutdown_timeout: resolved(&self.shutdown_timeout).0,
        }
    }

    /// The request core's settings (call after [`resolve`](Self::resolve)).
    pub fn settings(&self) -> pipeline::Settings {
        let d = pipeline::Settings::default();
        pipeline::Settings {
            limits: h1::Limits {
                max_request_line: resolved(&self.max_request_line),
                max_header_bytes: resolved(&self.max_header_bytes),
                max_headers: resolved(&self.max_headers),
                ..d.limits.clone()
            },
            max_body: resolved(&self.max_body).0,
            keepalive_timeout: resolved(&self.keepalive_timeout).0,
            header_timeout: resolved(&self.header_timeout).0,
            send_timeout: resolved(&self.send_timeout).0,
            max_conns_per_ip: resolved(&self.max_conns_per_ip),
            min_rate: resolved(&self.min_rate).0,
            min_rate_grace: resolved(&self.min_rate_grace).0,
            max_keepalive_requests: resolved(&self.max_keepalive_requests),
            cache_size: resolved(&self.cache_size).0,
            max_cached_file: resolved(&self.max_cached_file).0,
            max_ranges: resolved(&self.max_ranges),
            browse: resolved(&self.browse),
            follow_symlinks: resolved(&self.follow_symlinks),
            cgi: self.cgi_dir.clone().map(|dir| self.cgi_settings(pipeline::Scripts::Dir(dir))),
            schedule: self.schedule(),
            cache_control: self.cache_control().unwrap_or_default(),
            compression: self.compression().unwrap_or_default(),
            error_pages: self.error_pages().unwrap_or_default(),
            tls_handshake_timeout: resolved(&self.tls_handshake_timeout).0,
            hsts: self
                .hsts
                .filter(|_| self.tls_listen.is_some())
                .map(|max_age| format!("max-age={}", max_age.0.as_secs()).into()),
            ..d
        }
    }

    /// The certificates `--tls-*` name, if HTTPS is asked for; an error
    /// says what is missing or mismatched.
    pub fn tls(&self) -> Result<Option<transport::tls::CertSource>, String> {
        transport::tls::CertSource::from_flags(
            self.tls_listen.is_some(),
            self.tls_cert.clone().unwrap_or_default(),
            self.tls_key.clone().unwrap_or_default(),
            resolved(&self.tls_self_signed),
        )?
        .map(|source| source.with_ocsp(self.tls_ocsp.clone().unwrap_or_default()))
        .transpose()
    }

    /// `--cache-control`'s rules, or why they cannot be read (from a
    /// config file, which clap did not check).
    pub fn cache_control(&self) -> Result<pipeline::cache_control::CacheControl, String> {
        pipeline::cache_control::CacheControl::parse(self.cache_control.as_deref().unwrap_or_default())
    }

    /// `--compress` and its companions, or why they cannot be read (from
    /// a config file, which clap did not check).
    pub fn compression(&self) -> Result<pipeline::compress::Compression, String> {
        let d = pipeline::compress::Compression::default();
        let codings = match self.compress.as_deref().map(str::trim) {
            None | Some("off") => Vec::new(),
            Some(list) => pipeline::compress::Compression::parse_codings(list)?,
        };
        let types = resolved(&self.compress_types);
        let types = types.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
        Ok(pipeline::compress::Compression {
            codings,
            precompressed: resolved(&self.precompressed),
            types,
            min_size: resolved(&self.compress_min_size).0,
            // Set by the model, not by a flag (`Server::prepare`).
            aside: d.aside,
        })
    }

    /// `--error-page`'s pages, or why they cannot be read.
    pub fn error_pages(&self) -> Result<pipeline::error_pages::ErrorPages, String> {
        pipeline::error_pages::ErrorPages::parse(self.error_page.as_deref().unwrap_or_default())
    }

    /// `--schedule` and the `--srpt-*` options.
    pub fn schedule(&self) -> Schedule {
        match resolved(&self.schedule) {
            ScheduleName::Fifo => Schedule::Fifo,
            name @ (ScheduleName::Srpt | ScheduleName::SrptGroup) => {
                let d = Srpt::default();
                Schedule::Srpt(Srpt {
                    cutoffs: resolved(&self.srpt_classes).0,
                    max_wait: resolved(&self.srpt_max_wait).0,
                    priority_base: resolved(&self.srpt_priority_base),
                    unsent_limit: u32::try_from(resolved(&self.srpt_unsent_limit).0).unwrap_or(u32::MAX),
                    group: name == ScheduleName::SrptGroup,
                    ..d
                })
            }
        }
    }

    /// CGI settings for `scripts` from the `--cgi-*` options. The prefix
    /// always starts and ends with '/'.
    pub fn cgi_settings(&self, scripts: pipeline::Scripts) -> pipeline::CgiSettings {
        let d = pipeline::CgiSettings::new(scripts);
        let mut prefix = resolved(&self.cgi_prefix);
        if !prefix.starts_with('/') {
            prefix.insert(0, '/');
        }
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        pipeline::CgiSettings {
            prefix,
            timeout: resolved(&self.cgi_timeout).0,
            max_running: resolved(&self.max_cgi).max(1),
            path_env: resolved(&self.cgi_path),
            ..d
        }
    }
}

/// An option's value once [`ServeOptions::resolve`] has run, which gives
/// every option with a default its value: defaults are written once, in
/// the declaration, and nowhere after it.
pub fn resolved<T: Clone>(option: &Option<T>) -> T {
    option.clone().expect("resolve() gives every option with a default its value")
}

/// Where `modus serve` listens when told nothing (`--listen`'s default).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// `--defer-accept`'s default: h2o's. Long enough to cover any client that
/// sends its request with the handshake, short enough that a silent one is
/// still answered by the header timeout soon after.
pub const DEFER_ACCEPT: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_layers_under_flags_and_rejects_unknown_keys() {
        let file: ServeOptions =
            toml::from_str("listen = \"127.0.0.1:9\"\nthreads = 3\nmax-body = \"2m\"\n").unwrap();
        let mut flags = ServeOptions { threads: Some(7), ..ServeOptions::default() };
        flags.layer_over(file);
        let o = flags.resolve();
        assert_eq!(o.threads, Some(7));
        assert_eq!(o.listen.as_deref(), Some("127.0.0.1:9"));
        assert_eq!(o.settings().max_body, 2 << 20);
        assert!(toml::from_str::<ServeOptions>("lisen = \"x\"").is_err());
    }

    #[test]
    fn unknown_keys_get_a_hint() {
        let e = from_toml("threads = 2\nmax_body = \"10MiB\"\n").unwrap_err();
        assert_eq!(e, "unknown key `max_body` (line 2): use `max-body` (keys are the long flag names)");
        let e = from_toml("cahce-size = \"1G\"").unwrap_err();
        assert_eq!(e, "unknown key `cahce-size` (line 1): did you mean `cache-size`?");
        assert!(from_toml("frobnicate = 1").unwrap_err().contains("long flag names of `modus serve --help`"));
        assert!(from_toml("max-body = \"10 parsecs\"").unwrap_err().contains("invalid size"));
    }
}

/// Each option as a flag and as a config-file key, with a value that is
/// not its default: `every_option_is_one_flag_one_key_and_one_default`
/// fails until a new option has its line here.
#[cfg(test)]
const EVERY_OPTION: &str = r#"
root = "/srv/www"
listen = "127.0.0.1:9001"
port = 9002
tls-listen = "127.0.0.1:9443"
tls-cert = ["a.pem", "b.pem"]
tls-key = ["a.key", "b.key"]
tls-ocsp = ["a.der"]
tls-self-signed = true
tls-handshake-timeout = "3s"
hsts = "1d"
model = "event"
threads = 3
queue = 4
workers = 2
max-threads = 5
stage-threads = "read=1,data=1,cgi=1,write=1,log=1"
processes = 3
min-spare = 1
max-spare = 2
start-servers = 2
max-clients = 7
max-connections = 9
reuseport = true
defer-accept = "2s"
user = "nobody"
threads-per-child = 6
helpers = 2
cgi-dir = "/srv/cgi"
cgi-prefix = "/scripts/"
cgi-timeout = "5s"
max-cgi = 8
cgi-path = "/bin"
admin = "127.0.0.1:9100"
no-timing = true
trace = "/tmp/trace.csv"
trace-sample = 0.5
access-log = "off"
error-log = "/tmp/error.log"
keepalive-timeout = "7s"
header-timeout = "8s"
send-timeout = "9s"
max-conns-per-ip = 4
min-rate = "100"
min-rate-grace = "3s"
shutdown-timeout = "2s"
max-keepalive-requests = 10
max-request-line = 1000
max-header-bytes = 2000
max-headers = 20
max-body = "2MiB"
cache-size = "1MiB"
max-cached-file = "10KiB"
max-ranges = 3
browse = true
follow-symlinks = true
cache-control = ["*.css=max-age=60"]
compress = "gzip"
compress-types = "text/*"
compress-min-size = "1KiB"
precompressed = true
error-page = ["404=/404.html"]
schedule = "srpt"
srpt-classes = "1KiB,2KiB"
srpt-max-wait = "1s"
srpt-priority-base = 7
srpt-unsent-limit = "8KiB"
"#;

#[cfg(test)]
mod declared_once {
    use std::collections::BTreeSet;

    use clap::{Args, Parser};

    use super::*;

    /// `modus serve`'s flags alone, as clap reads them.
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        options: ServeOptions,
    }

    fn from_flags(args: &[String]) -> ServeOptions {
        let command_line = std::iter::once("serve".to_string()).chain(args.iter().cloned());
        Flags::try_parse_from(command_line).unwrap_or_else(|e| panic!("{args:?}: {e}")).options
    }

    /// What `--print-config` would print, as a table.
    fn printed(options: ServeOptions) -> toml::Table {
        toml::Table::try_from(options.resolve()).expect("options serialise")
    }

    /// A TOML value as it is typed after `--flag=`.
    fn typed(value: &toml::Value) -> String {
        match value {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    /// The options whose help names a default in words, not as a value.
    const DEFAULT_IN_WORDS: [&str; 3] = ["cgi-dir", "compress", "start-servers"];

    #[test]
    fn every_option_is_one_flag_one_key_and_one_default() {
        let every: toml::Table = toml::from_str(EVERY_OPTION).unwrap();
        let command = ServeOptions::augment_args(clap::Command::new("serve"));
        let command_line_only = ["config", "check", "print-config"];
        let flags: BTreeSet<&str> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|flag| !command_line_only.contains(flag))
            .collect();
        let keys: BTreeSet<&str> = every.keys().map(String::as_str).filter(|k| *k != "root").collect();
        assert_eq!(flags, keys, "every flag is a config key of the same name, and every key a flag");

        let all_set = from_toml(EVERY_OPTION).unwrap();
        let serialised: BTreeSet<String> = printed(all_set).keys().cloned().collect();
        let written: BTreeSet<String> = every.keys().cloned().collect();
        assert_eq!(serialised, written, "every option is written back under its key");

        let defaults = printed(ServeOptions::default());
        for (key, value) in &every {
            let from_file = printed(from_toml(&format!("{key} = {value}")).unwrap());
            let args: Vec<String> = match (key.as_str(), value) {
                ("root", value) => vec![typed(value)],
                (_, toml::Value::Array(items)) => {
                    items.iter().map(|v| format!("--{key}={}", typed(v))).collect()
                }
                (_, value) => vec![format!("--{key}={}", typed(value))],
            };
            assert_eq!(printed(from_flags(&args)), from_file, "{key}: the flag and the key differ");
            assert_ne!(from_file, defaults, "{key}: EVERY_OPTION gives it its default");
            if let Some(default) = defaults.get(key) {
                let written_back = printed(from_toml(&format!("{key} = {default}")).unwrap());
                assert_eq!(written_back, defaults, "{key}: --print-config's default does not read back");
            }
        }

        // The default a flag's help names is the one it gets.
        for arg in command.get_arguments() {
            let (Some(flag), Some(help)) = (arg.get_long(), arg.get_help()) else { continue };
            let help = help.to_string();
            let Some((_, named)) = help.split_once("[default: ") else { continue };
            let named: String = named.trim_end_matches(']').split_whitespace().collect();
            if DEFAULT_IN_WORDS.contains(&flag) {
                continue;
            }
            let given = printed(from_flags(&[format!("--{flag}={named}")]));
            assert_eq!(given, defaults, "--{flag}: its help names {named} as the default");
        }
    }
}

//! `modus serve`: configuration to a running model, signals, shutdown.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use pipeline::accesslog::LogTarget;
use pipeline::{AccessLog, ErrorLog, Pipeline, Site};
use transport::Shutdown;

use crate::config::{resolved, ServeOptions};

/// The files under `crates/server/demo/`, embedded by build.rs.
const DEMO_SITE: &[pipeline::EmbeddedFile] = include!(concat!(env!("OUT_DIR"), "/demo_files.rs"));

/// Exit status for usage and configuration errors (clap's and ripgrep's convention).
const EXIT_CONFIG: u8 = 2;

pub fn main(mut options: ServeOptions) -> ExitCode {
    // First, before any file is opened: descriptor 3 may be a socket
    // systemd passed in.
    let activated = match transport::systemd::activated_listener() {
        Ok(activated) => activated,
        Err(e) => return fail(EXIT_CONFIG, &anyhow!("socket activation: {e}")),
    };
    // The command line, kept for SIGHUP: a reload reads the file again under it.
    let command_line = options.clone();
    if let Err(e) = with_config_file(&mut options) {
        return fail(EXIT_CONFIG, &e);
    }
    let options = options.resolve();
    if options.print_config {
        print!("{}", toml::to_string(&options).expect("options serialise"));
        return ExitCode::SUCCESS;
    }
    let server = match Server::prepare(&options, AdminListener::Bind) {
        Ok(server) => server,
        Err(e) => return fail(EXIT_CONFIG, &e),
    };
    if options.check {
        // What a start would do first: the address is free (or handed in).
        if activated.is_none() {
            if let Err(e) = std::net::TcpListener::bind(server.addr) {
                let e = anyhow!(transport::listener::bind_failure(server.listen_flag(), server.addr, &e));
                return fail(EXIT_CONFIG, &e);
            }
            if let Some(plain) = server.redirect_from {
                if let Err(e) = std::net::TcpListener::bind(plain) {
                    return fail(
                        EXIT_CONFIG,
                        &anyhow!(transport::listener::bind_failure("--listen", plain, &e)),
                    );
                }
            }
        }
        println!("configuration ok");
        return ExitCode::SUCCESS;
    }
    match server.run(&options, activated, command_line) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e),
    }
}

/// Layers `--config`'s file (if any) under the flags in `options`.
fn with_config_file(options: &mut ServeOptions) -> anyhow::Result<()> {
    if let Some(path) = options.config.clone() {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file = crate::config::from_toml(&text).map_err(|e| anyhow!("in {}: {e}", path.display()))?;
        options.layer_over(file);
    }
    Ok(())
}

/// What a reload (SIGHUP) does: the command line as started, the config
/// file read again under it, checked like a start, a pipeline built —
/// except what a running server cannot change without a restart.
fn reloader(
    command_line: ServeOptions,
    running: ServeOptions,
    stats: Arc<pipeline::Stats>,
    admin: Option<SocketAddr>,
) -> models::Reload {
    Arc::new(move || {
        let mut options = command_line.clone();
        with_config_file(&mut options).map_err(|e| format!("{e:#}"))?;
        let options = options.resolve();
        for (what, new, old) in [
            ("--model", &options.model, &running.model),
            ("--listen", &options.listen, &running.listen),
            ("--tls-listen", &options.tls_listen, &running.tls_listen),
            ("--admin", &options.admin, &running.admin),
            ("--user", &options.user, &running.user),
        ] {
            if new != old {
                return Err(format!(
                    "{what} changed ({} → {}): that takes a restart",
                    old.as_deref().unwrap_or("none"),
                    new.as_deref().unwrap_or("none")
                ));
            }
        }
        let mut server =
            Server::prepare(&options, AdminListener::Running(admin)).map_err(|e| format!("{e:#}"))?;
        // The counters carry on across the reload.
        Arc::get_mut(&mut server.pipeline).expect("not shared yet").stats = stats.clone();
        Ok(models::Reloaded { pipeline: server.pipeline, tuning: options.tuning() })
    })
}

fn fail(code: u8, e: &anyhow::Error) -> ExitCode {
    eprintln!("modus: {e:#}");
    ExitCode::from(code)
}

/// Everything checked and opened before the first connection.
struct Server {
    model: &'static models::ModelInfo,
    pipeline: Arc<Pipeline>,
    addr: SocketAddr,
    /// `--admin`, bound.
    admin: Option<std::net::TcpListener>,
    /// `--user`: who to become once the ports are bound.
    run_as: Option<RunAs>,
    /// `--listen` beside `--tls-listen`: the plain address redirected to HTTPS.
    redirect_from: Option<SocketAddr>,
}

/// `--admin`'s listener: bound by a start, kept as it is by a reload.
enum AdminListener {
    Bind,
    /// The running server's, at this address.
    Running(Option<SocketAddr>),
}

impl Server {
    fn prepare(options: &ServeOptions, admin_listener: AdminListener) -> anyhow::Result<Server> {
        let name = resolved(&options.model);
        let name = name.as_str();
        let model = models::find(name).ok_or_else(|| {
            anyhow!("unknown model {name:?}; the models are: {}", models::names().join(", "))
        })?;
        let (flag, listen) = match (&options.tls_listen, &options.listen) {
            (Some(tls), _) => ("--tls-listen", tls.as_str()),
            (None, listen) => ("--listen", listen.as_deref().unwrap_or_default()),
        };
        let addr = socket_addr(flag, listen)?;
        // Beside HTTPS, a plain listener redirects to it (redirect.rs).
        let redirect_from = match (&options.tls_listen, &options.listen) {
            (Some(_), Some(plain)) => Some(socket_addr("--listen", plain)?),
            _ => None,
        };
        if redirect_from.is_some_and(|plain| plain == addr && addr.port() != 0) {
            bail!("--listen and --tls-listen name one address ({addr}): the plain side needs its own port");
        }
        let tls = options.tls().map_err(|e| anyhow!(e))?.map(transport::tls::ServerTls::new);
        let tls = tls.transpose().map_err(|e| anyhow!(e))?;
        options.cache_control().map_err(|e| anyhow!("cache-control: {e}"))?;
        options.compression().map_err(|e| anyhow!("compress: {e}"))?;
        let error_pages = options.error_pages().map_err(|e| anyhow!("error-page: {e}"))?;
        if let Some(root) = &options.root {
            // A page that names nothing would be answered with the
            // built-in one on every error: a typo found at start, not later.
            for (status, path) in error_pages.pages() {
                let file = root.join(path.trim_start_matches('/'));
                if !file.is_file() {
                    bail!("--error-page {status}={path}: {} is not a file", file.display());
                }
            }
        }
        let mut settings = options.settings();
        settings.compression.aside = model.caps.pipeline_on_loop;
        if tls.is_some() || !model.sends_files() {
            // Files would be read to be sent: keep more of them as bytes.
            settings.inline_max = pipeline::INLINE_MAX_COPY;
        }
        if let Some(cgi) = &mut settings.cgi {
            if let pipeline::Scripts::Dir(dir) = &mut cgi.scripts {
                if !dir.is_dir() {
                    bail!("--cgi-dir {} is not a directory", dir.display());
                }
                *dir =
                    std::fs::canonicalize(&*dir).with_context(|| format!("--cgi-dir {}", dir.display()))?;
            }
            if pipeline::resolve::normalize(&cgi.prefix).ok().as_deref() != Some(cgi.prefix.as_str()) {
                bail!("--cgi-prefix {:?} is not a plain URL path", cgi.prefix);
            }
        } else if options.root.is_none() {
            settings.cgi = crate::demo_programs::scripts().map(|programs| options.cgi_settings(programs));
        }
        let admin = match (&options.admin, &admin_listener) {
            (None, _) | (_, AdminListener::Running(_)) => None,
            (Some(spec), AdminListener::Bind) => {
                let addr = socket_addr("--admin", spec)?;
                Some(
                    std::net::TcpListener::bind(addr)
                        .map_err(|e| anyhow!(transport::listener::bind_failure("--admin", addr, &e)))?,
                )
            }
        };
        let site = match &options.root {
            Some(root) => {
                if !root.is_dir() {
                    bail!("ROOT {} is not a directory", root.display());
                }
                Site::dir(root, settings.follow_symlinks)
                    .with_context(|| format!("opening {}", root.display()))?
            }
            None => demo_site(
                match admin_listener {
                    AdminListener::Running(addr) => addr,
                    AdminListener::Bind => admin.as_ref().map(|a| a.local_addr()).transpose()?,
                },
                addr,
            ),
        };
        let access = &resolved(&options.access_log);
        let access_log =
            AccessLog::open(LogTarget::parse(access)).with_context(|| format!("--access-log {access}"))?;
        let errors = &resolved(&options.error_log);
        let error_log =
            ErrorLog::open(LogTarget::parse(errors)).with_context(|| format!("--error-log {errors}"))?;
        let tuning = options.tuning();
        for (flag, n) in [
            ("--threads", tuning.threads),
            ("--workers", tuning.workers),
            ("--max-threads", tuning.max_threads),
            ("--processes", tuning.processes),
            ("--max-clients", tuning.max_clients),
            ("--threads-per-child", tuning.threads_per_child),
            ("--helpers", tuning.helpers),
            ("--max-connections", tuning.max_connections),
        ] {
            if n == 0 {
                bail!("{flag} 0: at least 1 is needed to serve anything");
            }
        }
        let has_loops = |caps: models::Caps| caps.event_driven && !caps.staged;
        if tuning.reuseport && !has_loops(model.caps) {
            let with_loops: Vec<&str> =
                models::MODELS.iter().filter(|m| has_loops(m.caps)).map(|m| m.name).collect();
            let with_loops = match with_loops.split_last() {
                Some((last, [])) => last.to_string(),
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            };
            bail!(
                "--reuseport gives each event loop a listener of its own: it is for {with_loops}, not {name}"
            );
        }
        if model.caps.event_driven && tuning.max_connections < tuning.workers.max(1) {
            // Every loop needs at least one connection of its own.
            bail!("--max-connections {} is below --workers {}", tuning.max_connections, tuning.workers);
        }
        let mut stats = pipeline::Stats::new(!resolved(&options.no_timing));
        if let Some(path) = &options.trace {
            let sample = resolved(&options.trace_sample);
            if !(0.0..=1.0).contains(&sample) {
                bail!("--trace-sample {sample} is not between 0 and 1");
            }
            stats = stats.with_trace(path, sample).with_context(|| format!("--trace {}", path.display()))?;
        }
        let mut pipeline =
            Pipeline::new(settings, site, Arc::new(access_log), Arc::new(error_log)).with_stats(stats);
        if let Some(tls) = tls {
            pipeline = pipeline.with_tls(tls);
        }
        let run_as = options.user.as_deref().map(RunAs::resolve).transpose()?;
        Ok(Server { model, pipeline: Arc::new(pipeline), addr, admin, run_as, redirect_from })
    }

    /// The flag that named the listener, for messages about it.
    fn listen_flag(&self) -> &'static str {
        if self.pipeline.tls.is_some() {
            "--tls-listen"
        } else {
            "--listen"
        }
    }

    fn run(
        mut self,
        options: &ServeOptions,
        activated: Option<std::net::TcpListener>,
        command_line: ServeOptions,
    ) -> anyhow::Result<()> {
        // Only the event-driven models hold connections without a thread or
        // process each, so only they can run out of descriptors first.
        let capped = self.model.caps.event_driven.then(|| options.tuning().max_connections);
        raise_open_file_limit(&self.pipeline, capped);
        let listener = match activated {
            // systemd bound it: --listen is the service manager's business then.
            Some(listener) => listener,
            None => transport::listener::bind(self.addr, options.tuning().reuseport)
                .map_err(|e| anyhow!(transport::listener::bind_failure(self.listen_flag(), self.addr, &e)))?,
        };
        // Before the address is announced: sockets accepted by the kernel
        // inherit these options when their handshake completes, even before
        // the model calls accept(), so setting them later would leave the
        // first connections without timeouts.
        transport::listener::set_accepted_defaults(&listener, pipeline::BLOCKING_TICK)?;
        let defer = resolved(&options.defer_accept).0;
        transport::listener::set_defer_accept(&listener, defer).context("--defer-accept")?;
        let local = listener.local_addr()?;
        let plain = match self.redirect_from {
            Some(plain) => Some(
                std::net::TcpListener::bind(plain)
                    .map_err(|e| anyhow!(transport::listener::bind_failure("--listen", plain, &e)))?,
            ),
            None => None,
        };
        // Ports bound and logs open: what needed root is done.
        if let Some(run_as) = &self.run_as {
            if run_as.changes_user() {
                // What needs root later — a log reopened after logrotate, a
                // renewed certificate read — is asked of the keeper.
                let exe = crate::demo_programs::this_binary().context("--user: naming this binary")?;
                transport::keeper::start(&exe, kept_files(options)).context("--user: starting the keeper")?;
            }
            run_as.become_it()?;
        }
        // After the drop: the redirector needs no rights at all.
        let redirecting = match plain {
            Some(plain) => {
                let from = plain.local_addr()?;
                let exe = crate::demo_programs::this_binary().context("naming this binary")?;
                std::process::Command::new(exe)
                    .args([crate::redirect::ARG, &local.port().to_string()])
                    .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(plain)))
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .context("--listen beside --tls-listen: starting the redirector")?;
                format!(" redirect={from}")
            }
            None => String::new(),
        };
        let shutdown = Shutdown::new()?;
        let admin_addr = match &self.admin {
            Some(admin) => format!(" admin={}", admin.local_addr()?),
            None => String::new(),
        };
        // The first stdout line is the contract with scripts and tests: the real address.
        {
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "listening on {local} model={} pid={}{admin_addr}{}{redirecting}",
                self.model.name,
                std::process::id(),
                if self.pipeline.tls.is_some() { " https" } else { "" },
            )?;
            out.flush()?;
        }
        if let Some(tls) = &self.pipeline.tls {
            if tls.reloadable() {
                let count = options.tls_cert.as_ref().map_or(0, Vec::len);
                self.pipeline.error_log.info(format_args!(
                    "HTTPS on {local}: {count} certificate{} (SIGHUP reads them again)",
                    if count == 1 { "" } else { "s, chosen by SNI" }
                ));
            } else {
                self.pipeline.error_log.warn(format_args!(
                    "HTTPS on {local} with a throw-away self-signed certificate for localhost: \
                     browsers will warn and clients must skip verification (curl -k https://{local}/); \
                     give --tls-cert and --tls-key to serve a real one"
                ));
            }
        }
        let root = options.root.as_ref().map_or("(embedded demo site)".into(), |r| r.display().to_string());
        if let Some(cgi) = &self.pipeline.settings.cgi {
            let from = match &cgi.scripts {
                pipeline::Scripts::Dir(dir) => dir.display().to_string(),
                pipeline::Scripts::Programs(p) => {
                    p.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                }
            };
            self.pipeline.error_log.info(format_args!("CGI: {} runs {from}", cgi.prefix));
            if let (pipeline::Scripts::Dir(dir), pipeline::Site::Dir(site)) =
                (&cgi.scripts, &self.pipeline.site)
            {
                // Under ROOT the scripts are also plain files at their own
                // URLs: their source would be served to anyone who asks.
                if std::fs::canonicalize(site.path()).is_ok_and(|root| dir.starts_with(root)) {
                    self.pipeline.error_log.warn(format_args!(
                        "--cgi-dir {} lies inside ROOT: the scripts' source is served as static files; \
                         keep CGI programs outside the document root",
                        dir.display()
                    ));
                }
            }
        }
        if self.pipeline.settings.cgi.is_none() && options.root.is_none() {
            self.pipeline.error_log.warn(format_args!(
                "the demo site's /cgi-bin/ programs are off: the running binary cannot be named \
                 (is /proc mounted?)"
            ));
        }
        self.pipeline.error_log.info(format_args!(
            "modus {} serving {root} on {}://{local}/ with model {}",
            env!("CARGO_PKG_VERSION"),
            if self.pipeline.tls.is_some() { "https" } else { "http" },
            self.model.name
        ));
        // The service manager (Type=notify) learns that connections are taken.
        if let Err(e) = transport::systemd::notify(&format!("READY=1\nMAINPID={}", std::process::id())) {
            self.pipeline.error_log.warn(format_args!("telling systemd READY=1: {e}"));
        }
        if nix::unistd::geteuid().is_root() {
            self.pipeline.error_log.warn(format_args!(
                "running as root: every file and script is then open to the server; \
                 --user names the user to run as once the ports are bound"
            ));
        }

        let admin_addr = self.admin.as_ref().map(|a| a.local_addr()).transpose()?;
        let reload = reloader(command_line, options.clone(), self.pipeline.stats.clone(), admin_addr);
        let env = models::ModelEnv {
            listener,
            pipeline: self.pipeline.clone(),
            shutdown,
            tuning: options.tuning(),
            admin: None,
            reload: Some(reload),
        };
        let admin = self.admin.take().map(|listener| {
            let info = admin_info(self.model, options, &self.pipeline);
            let serve = move |listener, source: &dyn Fn() -> pipeline::stats::Snapshot, stop: &Shutdown| {
                crate::admin::run(listener, source, &info, stop)
            };
            models::Admin { listener, serve: Arc::new(serve) }
        });
        models::runtime::host(self.model, env, admin).context("serving")
    }
}

/// The model and the settings the status page shows.
fn admin_info(
    model: &'static models::ModelInfo,
    options: &ServeOptions,
    pipeline: &Pipeline,
) -> crate::admin::Info {
    let t = options.tuning();
    let mut settings: Vec<(&'static str, String)> =
        vec![("listen", options.listen.clone().unwrap_or_default())];
    // The knobs the model declares it reads, in its order.
    settings.extend(model.knobs.iter().map(|knob| (knob.flag(), knob.value(&t))));
    let s = options.settings();
    settings.push(("keepalive-timeout", format!("{:?}", s.keepalive_timeout)));
    settings.push(("max-keepalive-requests", s.max_keepalive_requests.to_string()));
    settings.push(("cache-size", s.cache_size.to_string()));
    settings.push((
        "root",
        options.root.as_ref().map_or("(embedded demo site)".into(), |r| r.display().to_string()),
    ));
    if let Some(trace) = &options.trace {
        settings.push(("trace", format!("{} (sample {})", trace.display(), resolved(&options.trace_sample))));
    }
    crate::admin::Info {
        model: model.name,
        paper_name: model.paper_name,
        pid: std::process::id(),
        timing: pipeline.stats.timing,
        settings,
    }
}

/// The embedded demo site; with `--admin`, its front page links to the
/// status page (the page's one line made at start-up, in place of the hint
/// between `<!--admin-->` and `<!--/admin-->`).
fn demo_site(admin: Option<SocketAddr>, listen: SocketAddr) -> Site {
    let files: Vec<pipeline::EmbeddedFile> = DEMO_SITE
        .iter()
        .map(|file| {
            let Some(page) = std::str::from_utf8(file.bytes).ok().filter(|_| file.path == "/index.html")
            else {
                return *file;
            };
            let page = fill(page, "models", &models_rows());
            let page = match listen.port() {
                // The port a start picks (`--listen :0`) is not known yet:
                // the page's script shows the browser's own origin.
                0 => page,
                _ => fill(&page, "origin", &format!("http://{}", http_host(listen))),
            };
            let page = match admin {
                Some(admin) => {
                    let url = format!("http://{}/status", http_host(admin));
                    let link = format!(
                        "<p class=\"note\">Live status of this server: <a href=\"{url}\">{url}</a> \
                         (also <code>/status.json</code> and <code>/metrics</code> there).</p>"
                    );
                    fill(&page, "admin", &link)
                }
                None => page,
            };
            // Once per process: the site lives as long as the server.
            let bytes: &'static [u8] = Box::leak(page.into_bytes().into_boxed_slice());
            pipeline::EmbeddedFile { path: file.path, bytes }
        })
        .collect();
    Site::embedded(&files)
}

/// `page` with what is between `<!--NAME-->` and `<!--/NAME-->` replaced by `with`.
fn fill(page: &str, name: &str, with: &str) -> String {
    let (open, close) = (format!("<!--{name}-->"), format!("<!--/{name}-->"));
    let Some((before, rest)) = page.split_once(&open) else { return page.to_string() };
    let after = rest.split_once(&close).map_or("", |(_, after)| after);
    format!("{before}{with}{after}")
}

/// The demo page's table of models, from the registry `modus models` reads.
fn models_rows() -> String {
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    models::MODELS
        .iter()
        .map(|m| {
            format!(
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>\n",
                m.name,
                esc(m.summary),
                esc(m.paper_name)
            )
        })
        .collect()
}

/// An address as a URL's host and port: `127.0.0.1:8080`, `[::1]:8080`, and
/// a wildcard address as the loopback one a browser on this host reaches.
fn http_host(addr: SocketAddr) -> String {
    match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => format!("127.0.0.1:{}", addr.port()),
        ip if ip.is_unspecified() => format!("[::1]:{}", addr.port()),
        _ => addr.to_string(),
    }
}

/// Lifts the soft limit on open descriptors to the hard one (nginx's
/// `worker_rlimit_nofile`): every connection is a descriptor, and the usual
/// soft default of 1024 would cap an event loop far below what the machine
/// allows. `--max-connections` then bounds them; like nginx ("worker_connections
/// exceed open file resource limit") it warns when the descriptors cannot
/// cover that many connections.
fn raise_open_file_limit(pipeline: &Pipeline, max_connections: Option<usize>) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        if let Err(e) = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum })
        {
            pipeline.error_log.warn(format_args!("cannot raise the open-file limit: {e}"));
        }
    }
    let Some(max) = max_connections else { return };
    // None: unlimited.
    if let Some(files) = getrlimit(Resource::Nofile).current {
        if files < max as u64 {
            pipeline.error_log.warn(format_args!(
                "--max-connections {max} exceeds the open-file limit {files}: accepting will fail \
                 (and pause) before the cap is reached"
            ));
        }
    }
}

/// An address flag's value as typed (`8080`, `:8080`, `HOST:PORT`), resolved.
fn socket_addr(flag: &str, typed: &str) -> anyhow::Result<SocketAddr> {
    let spec = units::listen_addr(typed).map_err(|e| anyhow!("{flag}: {e}"))?;
    spec.to_socket_addrs()
        .with_context(|| format!("{flag} {typed:?}"))?
        .next()
        .ok_or_else(|| anyhow!("{flag} {typed:?} resolves to no address"))
}

/// Who `--user USER[:GROUP]` names, looked up when the configuration is
/// checked (a name that does not exist is a configuration error).
/// The files a server that gave up root must still open: its log files
/// (reopened on USR1 and HUP) and its certificates and keys (read again on
/// HUP), each as a reload would name it.
fn kept_files(options: &ServeOptions) -> Vec<std::path::PathBuf> {
    let logs = [options.access_log.as_deref(), options.error_log.as_deref()];
    let logs = logs.into_iter().flatten().filter_map(|target| match LogTarget::parse(target) {
        LogTarget::File(path) => Some(path),
        _ => None,
    });
    let tls =
        [&options.tls_cert, &options.tls_key, &options.tls_ocsp].into_iter().flatten().flatten().cloned();
    logs.chain(tls).collect()
}

struct RunAs {
    spec: String,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
}

impl RunAs {
    fn resolve(spec: &str) -> anyhow::Result<RunAs> {
        use nix::unistd::{getuid, Group, User};
        let (user_name, group_name) = match spec.split_once(':') {
            Some((user, group)) => (user, Some(group)),
            None => (spec, None),
        };
        let user = User::from_name(user_name)
            .with_context(|| format!("--user {spec}: looking the user up"))?
            .ok_or_else(|| anyhow!("--user {spec}: no user {user_name:?} on this system"))?;
        let gid = match group_name {
            Some(name) => {
                Group::from_name(name)
                    .with_context(|| format!("--user {spec}: looking the group up"))?
                    .ok_or_else(|| anyhow!("--user {spec}: no group {name:?} on this system"))?
                    .gid
            }
            None => user.gid,
        };
        if getuid() != user.uid && !getuid().is_root() {
            bail!("--user {spec}: only root can become another user (modus runs as uid {})", getuid());
        }
        Ok(RunAs { spec: spec.to_string(), uid: user.uid, gid })
    }

    /// Whether becoming the user is a change (root becoming someone else).
    fn changes_user(&self) -> bool {
        nix::unistd::getuid() != self.uid
    }

    /// Gives up root for good — supplementary groups, then the group, then
    /// the user, the order that leaves no way back — and checks that root
    /// cannot be regained.
    fn become_it(&self) -> anyhow::Result<()> {
        use nix::unistd::{getuid, setgid, setgroups, setuid, Uid};
        if getuid() == self.uid {
            return Ok(());
        }
        setgroups(&[self.gid]).context("--user: setgroups")?;
        setgid(self.gid).context("--user: setgid")?;
        setuid(self.uid).context("--user: setuid")?;
        if setuid(Uid::from_raw(0)).is_ok() {
            bail!("--user {}: root could be regained after setuid; refusing to serve", self.spec);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_page_is_filled_in() {
        let page = "a <!--x-->old<!--/x--> b <!--y-->kept";
        assert_eq!(fill(page, "x", "new"), "a new b <!--y-->kept");
        assert_eq!(fill(page, "z", "new"), page, "no such block: unchanged");
        assert_eq!(http_host("0.0.0.0:9000".parse().unwrap()), "127.0.0.1:9000");
        assert_eq!(http_host("[::]:9000".parse().unwrap()), "[::1]:9000");
        assert_eq!(http_host("[::1]:80".parse().unwrap()), "[::1]:80");
        let index =
            std::str::from_utf8(DEMO_SITE.iter().find(|f| f.path == "/index.html").unwrap().bytes).unwrap();
        for block in ["models", "origin", "admin"] {
            assert!(index.contains(&format!("<!--{block}-->")), "{block}");
        }
        let rows = models_rows();
        assert_eq!(rows.lines().count(), models::MODELS.len());
        assert!(rows.contains("<tr><td><code>uring</code></td>"), "{rows}");
    }
}

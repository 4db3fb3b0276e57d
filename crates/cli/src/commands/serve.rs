//! `quiver serve`: the MCP server. Stdio by default (stdout carries only protocol messages);
//! `--http ADDR` serves streamable HTTP at `http://ADDR/mcp` instead. Wires the lifecycle host
//! (with its background rescans) into `quiver_mcp`: the host is the catalog source, its
//! `on_change` feeds the server's change channel so sessions hear `tools/list_changed`.
//! Metrics ([`quiver_telemetry::Metrics`]) are on with `--http` (served at `/metrics`) or
//! `--metrics ADDR` (a separate listener, for stdio mode); with `--http` the operator dashboard
//! is at `/ui`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use quiver_lifecycle::{Host, ScanReport};
use quiver_mcp::{Dashboard, HttpOptions, MCP_PATH, METRICS_PATH, QuiverServer, ServerOptions, SessionProfile};
use quiver_router::Router;
use quiver_telemetry::Metrics;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::GlobalArgs;
use crate::settings::Settings;

/// `--http` takes `IP:PORT`, or a bare port on the loopback address (`0` picks a free one).
fn http_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>()
        .map_err(|e| format!("{e}: give IP:PORT (e.g. 127.0.0.1:8765) or a port (0 picks a free one)"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve streamable HTTP at ADDR instead of stdio [ADDR default: 127.0.0.1:8765; port 0
    /// picks a free one]. The endpoint is /mcp; the bound address is printed on stderr.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:8765", value_parser = http_addr, env = "QUIVER_HTTP")]
    pub http: Option<SocketAddr>,
    /// Another Host name HTTP clients may use (only loopback names are accepted by default,
    /// against DNS rebinding). Repeatable.
    #[arg(long = "allow-host", value_name = "HOST", env = "QUIVER_ALLOW_HOSTS", value_delimiter = ',')]
    pub allow_hosts: Vec<String>,
    /// Profile for every session [default: the authenticated principal's (server.auth); on
    /// stdio or loopback HTTP without auth, per client name from the profiles' `clients` globs;
    /// else the configuration's default profile].
    #[arg(long, value_name = "NAME", env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
    /// Serve HTTP on a non-loopback address WITHOUT authentication (only behind a proxy that
    /// authenticates). Without it, such a bind is refused unless server.auth is configured.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (for stdio mode; the HTTP transport
    /// always serves /metrics next to /mcp). IP:PORT or a port on the loopback address; a
    /// non-loopback address needs server.auth.
    #[arg(long, value_name = "ADDR", value_parser = http_addr, env = "QUIVER_METRICS")]
    pub metrics: Option<SocketAddr>,
    /// Stdio: resume the session named KEY (its loaded tools), or start it under that name, so
    /// the next `quiver serve --resume KEY` continues it. Kept in the session store
    /// (`sessions.store`; with `memory`, files under state_dir/sessions). A client may instead
    /// send the key in initialize's `_meta` ("io.github.quiver/session").
    #[arg(long, value_name = "KEY", env = "QUIVER_RESUME", conflicts_with = "http")]
    pub resume: Option<String>,
    /// Export trace spans (a span per call, a child per pipeline stage and host-service round
    /// trip; a client's `_meta.traceparent` is the parent) over OTLP/HTTP with protobuf bodies to
    /// this collector base URL, e.g. http://127.0.0.1:4318 (/v1/traces is appended) [default:
    /// telemetry.otlp of the configuration, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_ENDPOINT when set, else off].
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
}

/// The authenticator of `server.auth`, reading the JWKS file relative to the config's folder.
fn authenticator(settings: &Settings) -> Result<Option<Arc<quiver_mcp::Authenticator>>> {
    let Some(auth) = &settings.config.server.auth else { return Ok(None) };
    let jwks = match &auth.jwt {
        Some(jwt) => {
            let path = settings.base_dir.join(&jwt.jwks_file);
            Some(
                std::fs::read_to_string(&path)
                    .with_context(|| format!("server.auth.jwt.jwks_file: cannot read {}", path.display()))?,
            )
        }
        None => None,
    };
    let a = quiver_mcp::Authenticator::new(auth, jwks.as_deref()).map_err(anyhow::Error::msg)?;
    Ok(Some(Arc::new(a)))
}

/// Feeds the catalog size and bundle rejections (by stage) of every scan into `metrics`, and
/// the rejections into the dashboard's log.
fn watch_host(metrics: &Arc<Metrics>, dashboard: Option<&Arc<Dashboard>>, host: &Arc<Host>, first_scan: &ScanReport) {
    let record = |m: &Metrics, d: Option<&Dashboard>, report: &ScanReport, host: &Host| {
        for r in &report.rejected {
            m.bundle_rejected(r.stage.as_str());
            if let Some(d) = d {
                d.rejected(&r.bundle.display().to_string(), r.stage.as_str(), &r.message);
            }
        }
        let catalog = host.catalog();
        m.catalog(catalog.plugins().len(), catalog.tools().len());
    };
    record(metrics, dashboard.map(|d| &**d), first_scan, host);
    let (m, d, weak) = (metrics.clone(), dashboard.cloned(), Arc::downgrade(host));
    host.on_scan(move |report| {
        if let Some(host) = weak.upgrade() {
            record(&m, d.as_deref(), report, &host);
        }
    });
}

/// Tells the operator (stderr) what later scans rejected, and the catalog warnings a rebuild
/// adds (the first scan's were reported by [`Settings::start_host_reporting`]): a bundle broken
/// on disk keeps its last good version serving, and is reported once until its files change.
fn report_rescans(host: &Arc<Host>) {
    host.on_scan(crate::settings::report_rejections);
    let shown = std::sync::Mutex::new(host.catalog().warnings().to_vec());
    host.on_change(move |_, catalog| {
        let mut shown = shown.lock().unwrap_or_else(|e| e.into_inner());
        for w in catalog.warnings().iter().filter(|w| !shown.contains(w)) {
            crate::telemetry::notice("WARN", &format!("warning: {w}"));
        }
        *shown = catalog.warnings().to_vec();
    });
}

/// The session store of `sessions.store`. On stdio the in-memory store would end with the
/// process, so sessions there are kept in files (`state_dir/sessions`) unless Redis is
/// configured. A Redis store is checked (PING) before serving.
async fn session_store(settings: &Settings, a: &ServeArgs) -> Result<Arc<quiver_mcp::SessionStore>> {
    let cfg = &settings.config.sessions;
    let ttl = Duration::from_millis(cfg.ttl_ms);
    let state_dir = settings.base_dir.join(&settings.config.state_dir);
    let kind = if a.http.is_none() && cfg.store == "memory" { "file" } else { cfg.store.as_str() };
    let store = quiver_mcp::SessionStore::from_config(kind, ttl, &state_dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", settings.origin()))?;
    store.check().await.map_err(|e| {
        anyhow::anyhow!(
            "{}: sessions.store: {e}. Start the server it names, fix the URL, or use `memory`",
            settings.origin()
        )
    })?;
    if let Some(key) = &a.resume
        && !quiver_mcp::valid_session_key(key)
    {
        anyhow::bail!(
            "--resume `{key}`: a session key is 1 to {} characters of A-Z, a-z, 0-9, `_`, `.` and `-`",
            quiver_mcp::MAX_SESSION_KEY_LEN
        );
    }
    let swept = store.sweep();
    tracing::info!(store = %store.describe(), expired_removed = swept, "session store");
    Ok(Arc::new(store))
}

/// Reads the plugin secrets again after every rescan and hands changed values to the router, so
/// an operator rotating a secret file or variable needs no restart. A secret that cannot be read
/// keeps its last value; its error is logged once (until it changes).
fn watch_secrets(settings: &Settings, host: &Arc<Host>, router: &Arc<Router>) {
    if settings.config.secrets.is_empty() {
        return;
    }
    let settings = settings.clone();
    let weak = Arc::downgrade(router);
    let last = std::sync::Mutex::new((settings.secrets.clone(), Vec::<String>::new()));
    host.on_scan(move |_| {
        let Some(router) = weak.upgrade() else { return };
        let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
        let (secrets, errors) = settings.reread_secrets(&last.0);
        if errors != last.1 {
            for e in &errors {
                tracing::warn!("{e}");
            }
        }
        if secrets != last.0 {
            tracing::info!("plugin secrets changed; tools get the new values from their next call");
            router.set_secrets(secrets.clone());
            last.0 = secrets;
        }
        last.1 = errors;
    });
}

pub fn run(g: &GlobalArgs, a: &ServeArgs) -> Result<()> {
    let mut settings = Settings::load(g)?;
    // The versions this host serves raise the rollback record (other commands only check it).
    settings.raise_rollback()?;
    // Worker plugins started before are listed at once from their verified manifest and the
    // load report their worker gave for the same library bytes; their workers start behind
    // `initialize` (docs/ARCHITECTURE.md, "Start-up").
    settings.host.isolation.start_cache = Some(settings.base_dir.join(&settings.config.state_dir).join("worker-info"));
    // Signed manifests that passed their checks are recorded in `state_dir/checked.log`: a later
    // scan of the same manifest bytes skips its JSON Schema check (docs/ARCHITECTURE.md).
    settings.host.verify.checked_manifests =
        Some(settings.base_dir.join(&settings.config.state_dir).join(quiver_lifecycle::record::LOG_FILE));
    if a.profile.is_some() {
        settings.profile(a.profile.as_deref())?;
    }
    let auth = if a.http.is_some() { authenticator(&settings)? } else { None };
    // The async runtime starts on another thread while this one runs the first scan
    // (verification, loads, worker starts; on this thread because upstream servers are tied to
    // the life of the thread that starts them). Nothing is served before both are done, so the
    // first `tools/list` is complete (a worker plugin listed from its kept load report is in it
    // while its worker still starts).
    let (scan, rt) = std::thread::scope(|scope| {
        let rt = scope.spawn(|| tokio::runtime::Builder::new_multi_thread().enable_all().build());
        let scan = settings.start_host_reporting();
        (scan, rt.join())
    });
    let (host, first_scan) = scan?;
    let rt = match rt {
        Ok(rt) => rt.context("cannot start the async runtime")?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    // Metrics are on whenever something can read them: the HTTP transport or `--metrics`.
    let metrics = (a.http.is_some() || a.metrics.is_some()).then(|| Arc::new(Metrics::new()));
    // The operator dashboard, on the HTTP transport.
    let dashboard = a.http.is_some().then(|| {
        let profiles = settings.config.profiles.iter().map(|(n, p)| SessionProfile::from_config(n, p)).collect();
        Arc::new(Dashboard::new(profiles))
    });
    report_rescans(&host);
    if let Some(m) = &metrics {
        watch_host(m, dashboard.as_ref(), &host, &first_scan);
    }
    let metrics_auth = if a.metrics.is_some() && a.http.is_none() { authenticator(&settings)? } else { None };
    let result = rt.block_on(async {
        let (changes_tx, changes) = watch::channel(host.catalog());
        host.on_change(move |_, catalog| {
            changes_tx.send_replace(catalog.clone());
        });
        let interval = settings.config.rescan_interval_ms;
        // With rescans off (0) the rescanner still runs for sources that change on their own.
        let _rescanner = host.spawn_rescanner(Duration::from_millis(interval));
        let mut router = Router::new(host.clone(), settings.router());
        if let Some(traces) = quiver_telemetry::trace_export() {
            router = router.with_traces(traces);
        }
        if let Some(m) = &metrics {
            router = router.with_metrics(m.clone());
            let m = m.clone();
            // Folds histogram samples into buckets so memory stays bounded between scrapes.
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(5));
                loop {
                    tick.tick().await;
                    m.run_upkeep();
                }
            });
        }
        let router = Arc::new(router);
        watch_secrets(&settings, &host, &router);
        if let (Some(addr), Some(m)) = (a.metrics, &metrics) {
            let (m, auth) = (m.clone(), metrics_auth.clone());
            // Refused before anything listens, and never announced as served.
            if auth.is_none() && !addr.ip().is_loopback() {
                anyhow::bail!(
                    "--metrics {addr}: refusing to serve metrics on a non-loopback address without authentication; configure server.auth in {} or bind 127.0.0.1",
                    settings.origin()
                );
            }
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics: cannot listen on {addr}"))?;
            let local = listener.local_addr()?;
            crate::telemetry::notice("INFO", &format!("quiver: serving metrics at http://{local}{METRICS_PATH}"));
            tokio::spawn(async move {
                if let Err(e) = quiver_mcp::serve_metrics_on(m, listener, auth, CancellationToken::new()).await {
                    tracing::error!(error = %e, "the metrics endpoint failed");
                }
            });
        }
        let profiles = SessionProfile::resolver(&settings.config, a.profile.clone());
        let mut options = ServerOptions::from_config(&settings.config);
        options.session_store = Some(session_store(&settings, a).await?);
        options.resume_key = a.resume.clone();
        let server = QuiverServer::with_options(host.clone(), router.clone(), profiles, changes, options);
        let served = match a.http {
            None => tokio::select! {
                served = quiver_mcp::serve_stdio(server) => served.context("the stdio MCP session failed"),
                signal = stop_signal() => {
                    crate::telemetry::notice("INFO", &format!("quiver: {signal}: ending the stdio session"));
                    Ok(())
                }
            },
            Some(addr) => {
                if auth.is_none() && !addr.ip().is_loopback() && !a.insecure_no_auth {
                    anyhow::bail!(
                        "refusing to serve MCP on {addr} without authentication: anyone who can reach it could run the tools. \
                         Configure server.auth in {} (bearer tokens made with `quiver token`, or jwt), bind a loopback address such as 127.0.0.1, \
                         or pass --insecure-no-auth if a proxy in front of Quiver authenticates",
                        settings.origin()
                    );
                }
                let listener =
                    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
                let local = listener.local_addr()?;
                crate::telemetry::notice("INFO", &format!("quiver: serving MCP at http://{local}{MCP_PATH}"));
                let shutdown = CancellationToken::new();
                let stop = shutdown.clone();
                tokio::spawn(async move {
                    let signal = stop_signal().await;
                    crate::telemetry::notice("INFO", &format!("quiver: {signal}: shutting down"));
                    stop.cancel();
                });
                let opts = HttpOptions {
                    allowed_hosts: a.allow_hosts.clone(),
                    shutdown,
                    auth,
                    insecure_no_auth: a.insecure_no_auth,
                    dashboard: dashboard.clone(),
                    ..HttpOptions::from_config(&settings.config.server)
                };
                quiver_mcp::serve_http_on(server, listener, opts).await.context("the HTTP MCP server failed")
            }
        };
        router.flush_transcripts();
        served
    });
    // A tool still running past its deadline must not keep the process alive.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The first of SIGINT (Ctrl-C) and SIGTERM (what service managers and container runtimes send
/// to stop a process): both end serving the same way, transcripts flushed. Its name.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server gracefully");
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

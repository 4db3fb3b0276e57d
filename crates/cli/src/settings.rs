//! From `quiver.yaml` to the settings of the host and router: the one place the configuration
//! file is found, read, validated and resolved (relative paths against its folder, trusted key
//! files read). Every command that loads plugins goes through [`Settings::load`]; `serve` does too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use quiver_catalog::ConflictPolicy;
use quiver_catalog::search::SearchSetup;
use quiver_lifecycle::worker::WorkerSettings;
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, VerifyPolicy};
use quiver_manifest::{HostConfig, NameConflicts, Profile, PublicKey, Secret, TrustedKeys};
use quiver_router::RouterSettings;

use crate::GlobalArgs;

/// The host configuration with everything resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration as read (paths as written).
    pub config: HostConfig,
    /// The file it was read from; `None` for the built-in defaults.
    pub config_path: Option<PathBuf>,
    /// The folder relative paths of the configuration are resolved against.
    pub base_dir: PathBuf,
    /// What the plugin host needs (plugins folder, trusted keys, limits), resolved.
    pub host: HostSettings,
    /// Plugin secrets (`secrets:`) whose values were read, per plugin id and name.
    pub secrets: BTreeMap<String, BTreeMap<String, Secret>>,
    /// Tool search (`search:`), loaded: the embedding model, if one is configured.
    pub search: SearchSetup,
}

impl Settings {
    /// Finds (see [`crate::config_file::locate`]) and reads the configuration: `--config FILE`,
    /// else `./quiver.yaml`, else the XDG config folder's `quiver/quiver.yaml`, else the built-in
    /// defaults. `--plugins DIR` overrides the plugins folder.
    pub fn load(g: &GlobalArgs) -> Result<Settings> {
        let cwd = std::env::current_dir().context("cannot determine the current folder")?;
        let (config, config_path, base_dir) = locate_and_read(g, &cwd)?;
        let plugins_override = g.plugins.as_ref().map(|p| absolute(&cwd, p));
        Settings::resolve(config, config_path, base_dir, plugins_override)
    }

    /// Resolves a configuration read from `config_path` (for messages) against `base_dir`.
    pub fn resolve(
        config: HostConfig,
        config_path: Option<PathBuf>,
        base_dir: PathBuf,
        plugins_override: Option<PathBuf>,
    ) -> Result<Settings> {
        let origin =
            config_path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "built-in defaults".to_owned());
        let trusted = read_trusted_keys(&config, &origin, &base_dir)?;
        if config.allow_unsigned {
            crate::telemetry::notice(
                "WARN",
                &format!(
                    "WARNING: allow_unsigned is ON ({origin}): bundles WITHOUT a signature file will be loaded and run.\n\
                     WARNING: this is for plugin development only; never enable it on a machine that runs untrusted bundles."
                ),
            );
        } else if trusted.is_empty() {
            tracing::warn!("no trusted_keys configured ({origin}): every bundle will be refused");
        }
        let isolation = isolation_policy(&config, &trusted, &origin)?;
        // Plugin secrets are read here (and again on every rescan by `quiver serve`:
        // [`Settings::reread_secrets`]); one that cannot be read refuses only the bundles needing
        // it (with the reason), never the host.
        let (secrets, secret_status) = read_secrets(&config, &base_dir);
        for (plugin, named) in &secret_status {
            for (name, status) in named {
                if let Err(e) = status {
                    tracing::warn!(plugin = %plugin, secret = %name, "secret unavailable: {e}");
                }
            }
        }
        let host = HostSettings {
            plugins_dir: plugins_override.unwrap_or_else(|| base_dir.join(&config.plugins_dir)),
            verify: VerifyPolicy {
                trusted,
                allow_unsigned: config.allow_unsigned,
                max_library_bytes: config.max_library_bytes,
                strict: config.strict,
                revoked: config.revoked.clone(),
                // Checked by every command; raised only by `serve` ([`Settings::raise_rollback`]).
                rollback: Some(Arc::new(
                    quiver_lifecycle::RollbackStore::checking(&base_dir.join(&config.state_dir))
                        .map_err(|e| anyhow::anyhow!("{origin}: state_dir: {e}"))?,
                )),
                secrets: quiver_lifecycle::SecretStatus::new(secret_status),
                plugin_config: Some(config.plugin_config.clone()),
                // `serve` records checked manifests in its state folder; other commands check
                // every manifest in full.
                checked_manifests: None,
            },
            cache_dir: config.cache_dir.as_ref().map(|d| base_dir.join(d)),
            conflicts: match config.name_conflicts {
                NameConflicts::Error => ConflictPolicy::Error,
                NameConflicts::Namespace => ConflictPolicy::Namespace,
            },
            isolation,
        };
        let search = search_setup(&config, &base_dir, &origin)?;
        Ok(Settings { config, config_path, base_dir, host, secrets, search })
    }

    /// The rollback record of `state_dir`, opened to be raised by the versions this host
    /// accepts (`serve`) or changed on purpose (`quiver rollback`); other commands only check
    /// against it. Creates the state folder.
    pub fn raise_rollback(&mut self) -> Result<Arc<quiver_lifecycle::RollbackStore>> {
        // The record `load` read, raised from now on (not read again), unless it is shared.
        let store = match self.host.verify.rollback.take().map(Arc::try_unwrap) {
            Some(Ok(checking)) => checking.raising(),
            _ => quiver_lifecycle::RollbackStore::open(&self.base_dir.join(&self.config.state_dir)),
        }
        .map_err(|e| anyhow::anyhow!("{}: state_dir: {e}", self.origin()))?;
        let store = Arc::new(store);
        self.host.verify.rollback = Some(store.clone());
        // Opening it made the state folder (a first start): the configuration's check is kept
        // there.
        if let (Some(path), Ok(cwd)) = (&self.config_path, std::env::current_dir()) {
            crate::config_file::keep_unrecorded_check(&cwd.join(path));
        }
        Ok(store)
    }

    /// Reads the plugin secrets again (an operator rotated a file or variable, or supplied one
    /// that was missing), starting from `last`: a secret that cannot be read now keeps its last
    /// value (a failed update keeps the last good state) and its error is returned, without the
    /// value, for the log. The bundle check's status ([`VerifyPolicy::secrets`], shared with the
    /// host) is updated, so a bundle refused for a secret loads at the next rescan once the
    /// secret can be read.
    pub fn reread_secrets(&self, last: &PluginSecrets) -> (PluginSecrets, Vec<String>) {
        let (mut now, mut status) = read_secrets(&self.config, &self.base_dir);
        let mut errors = Vec::new();
        for (plugin, named) in &mut status {
            for (name, st) in named {
                if let Err(e) = st {
                    match last.get(plugin).and_then(|m| m.get(name)) {
                        Some(v) => {
                            errors.push(format!("secrets.{plugin}.{name}: {e}; keeping the last value read"));
                            now.entry(plugin.clone()).or_default().insert(name.clone(), v.clone());
                            // The tools keep getting the last value: the secret is still supplied.
                            *st = Ok(());
                        }
                        None => errors.push(format!(
                            "secrets.{plugin}.{name}: {e}; the bundles needing it stay refused until it can be read"
                        )),
                    }
                }
            }
        }
        self.host.verify.secrets.set(status);
        (now, errors)
    }

    /// The name of a trusted key, by key id.
    pub fn key_name(&self, key_id: &str) -> Option<&str> {
        self.host.verify.trusted.find(key_id).map(|k| k.name.as_str())
    }

    /// The profile `name`, or the default profile; an unknown name is a usage error.
    pub fn profile(&self, name: Option<&str>) -> Result<(String, Profile)> {
        if let Some(n) = name
            && self.config.profile(n).is_none()
        {
            let known: Vec<&str> = self.config.profiles.keys().map(String::as_str).collect();
            return Err(crate::UsageError(format!(
                "no profile `{n}` in {} (profiles: {})",
                self.origin(),
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))
            .into());
        }
        let (n, p) = self.config.profile_for("quiver-cli", name);
        Ok((n.to_owned(), p.clone()))
    }

    /// The router's settings from the configuration's `router` and `transcripts` sections.
    pub fn router(&self) -> RouterSettings {
        let r = &self.config.router;
        RouterSettings {
            breaker_failures: r.breaker_failures,
            breaker_cooldown: Duration::from_millis(r.breaker_cooldown_ms),
            retry_base: Duration::from_millis(r.retry_base_ms),
            result_handle_ttl: Duration::from_millis(r.result_handle_ttl_ms),
            max_concurrency: r.max_concurrency as usize,
            transcript_dir: self.config.transcripts.dir.as_ref().map(|d| self.base_dir.join(d)),
            plugin_config: self.config.plugin_config.clone(),
            rate_limits: self.config.rate_limits.clone(),
            secrets: self.secrets.clone(),
        }
    }

    /// Where the configuration came from, for messages.
    pub fn origin(&self) -> String {
        self.config_path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "the built-in defaults".to_owned())
    }

    /// Starts a plugin host and scans the plugins folder once. Rejected bundles and catalog
    /// warnings are reported on stderr; they do not stop the host.
    pub fn start_host(&self) -> Result<Arc<Host>> {
        self.start_host_counting().map(|(host, _)| host)
    }

    /// [`Settings::start_host`], also returning what the first scan rejected (for commands that
    /// must exit non-zero then): bundles, then upstream sources that cannot serve. An upstream's
    /// tools left out while its others serve are reported, not counted.
    pub fn start_host_counting(&self) -> Result<(Arc<Host>, Rejected)> {
        self.start_host_reporting().map(|(host, report)| {
            let upstream = report.rejected.iter().filter(|e| e.stage == quiver_lifecycle::Stage::Upstream).count();
            (host, Rejected { bundles: report.rejected.len() - upstream, upstream })
        })
    }

    /// [`Settings::start_host`], also returning the first scan's report (for metrics).
    pub fn start_host_reporting(&self) -> Result<(Arc<Host>, quiver_lifecycle::ScanReport)> {
        if self.host.plugins_dir.exists() && !self.host.plugins_dir.is_dir() {
            bail!(
                "plugins folder {} is a file, not a folder (plugins_dir in {}, or --plugins); point it at the folder that holds the bundles",
                self.host.plugins_dir.display(),
                self.origin()
            );
        }
        if !self.host.plugins_dir.is_dir() {
            bail!(
                "plugins folder {} does not exist (plugins_dir in {}, or --plugins); build the bundled plugins with `cargo xtask build-plugins`",
                self.host.plugins_dir.display(),
                self.origin()
            );
        }
        let mut host = Host::new(self.host.clone()).context("cannot start the plugin host")?;
        host.set_search(self.search.clone());
        for source in &self.config.sources {
            host.add_source(Box::new(quiver_upstream::UpstreamSource::new(
                source.clone(),
                self.base_dir.clone(),
                Some(self.base_dir.join(&self.config.state_dir)),
            )));
        }
        let report = host.rescan();
        report_rejections(&report);
        let catalog = host.catalog();
        for w in catalog.warnings() {
            crate::telemetry::notice("WARN", &format!("warning: {w}"));
        }
        self.warn_unmatched_entries(&catalog);
        Ok((Arc::new(host), report))
    }

    /// Warns about each configuration entry that names what is not loaded, and so does nothing:
    /// `isolation.plugins` and `plugin_config` ids (a misspelt id in `isolation.plugins` would
    /// leave the plugin it meant running where trust alone puts it: a first-party bundle in the
    /// host process, unsandboxed), `rate_limits` tool names (a misspelt or alias name would
    /// leave the tool unlimited), and each profile's `eager` and `gated` tool names and
    /// `scopes`. Not an error: a plugin may not be installed yet, or failed its checks (reported
    /// above).
    fn warn_unmatched_entries(&self, catalog: &quiver_catalog::Catalog) {
        let plugins: Vec<&str> = catalog.plugins().iter().map(|p| p.id()).collect();
        let tools: Vec<&str> = catalog.tools().iter().map(|t| t.name.as_str()).collect();
        let mut scopes: Vec<&str> = catalog
            .tools()
            .iter()
            .flat_map(|t| {
                let def = catalog.def(t);
                let actions = def.spec.actions.iter().flat_map(|a| a.scopes.iter());
                def.spec.scopes.iter().chain(actions).map(String::as_str)
            })
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        let warn = |entry: &str, name: &str, known: &[&str], what: &str| {
            let close = known
                .iter()
                .map(|k| (quiver_manifest::edit_distance(name, k), k))
                .filter(|(d, k)| *d <= 2.max(k.len() / 4))
                .min();
            let hint = close.map(|(_, k)| format!("did you mean `{k}`? ")).unwrap_or_default();
            crate::telemetry::notice(
                "WARN",
                &format!(
                    "warning: {entry} in {} names no loaded {what}, so it has no effect; {hint}`quiver list` shows what is loaded",
                    self.origin()
                ),
            );
        };
        let ids = self.config.isolation.plugins.keys().map(|id| ("isolation.plugins", id));
        for (field, id) in ids.chain(self.config.plugin_config.keys().map(|id| ("plugin_config", id))) {
            if !plugins.contains(&id.as_str()) {
                warn(&format!("{field}.{id}"), id, &plugins, "plugin");
            }
        }
        // Rate limits are kept per canonical tool: an alias there limits nothing.
        for tool in self.config.rate_limits.keys().filter(|t| catalog.tool_index(t).is_none()) {
            match catalog.resolve(tool) {
                Some(r) => crate::telemetry::notice(
                    "WARN",
                    &format!(
                        "warning: rate_limits.{tool} in {} names an alias of `{}`, so it has no effect (limits are kept per tool); write the entry under `{}`",
                        self.origin(),
                        r.tool.name,
                        r.tool.name
                    ),
                ),
                None => warn(&format!("rate_limits.{tool}"), tool, &tools, "tool"),
            }
        }
        for (name, profile) in &self.config.profiles {
            for (field, names) in [("eager", &profile.eager), ("gated", &profile.gated)] {
                for tool in names.iter().filter(|t| catalog.resolve(t).is_none()) {
                    warn(&format!("profiles.{name}.{field}: `{tool}`"), tool, &tools, "tool");
                }
            }
            // A gated alias gates the whole tool it reaches (every action and name).
            for (alias, r) in profile.gated.iter().filter_map(|g| Some((g, catalog.resolve(g)?))) {
                if !r.is_canonical() {
                    crate::telemetry::notice(
                        "WARN",
                        &format!(
                            "warning: profiles.{name}.gated: `{alias}` in {} is an alias of `{}`, so the whole tool `{}` is gated (all its actions and names); to refuse only some actions, leave the profile without the scopes they need",
                            self.origin(),
                            r.tool.name,
                            r.tool.name
                        ),
                    );
                }
            }
            for scope in profile.scopes.iter().filter(|s| *s != "*" && !scopes.contains(&s.as_str())) {
                warn(&format!("profiles.{name}.scopes: `{scope}`"), scope, &scopes, "tool's scope");
            }
        }
    }
}

/// How many bundles and upstream sources a scan rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// Bundles of the plugins folder that failed a check.
    pub bundles: usize,
    /// Upstream sources that cannot serve: down, or naming a tool another plugin serves.
    pub upstream: usize,
}

impl Rejected {
    /// True when nothing was rejected.
    pub fn is_empty(self) -> bool {
        self.bundles == 0 && self.upstream == 0
    }
}

impl std::fmt::Display for Rejected {
    /// `2 bundle(s) rejected`, `1 upstream source(s) not served`, or both joined by `and`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.bundles, self.upstream) {
            (b, 0) => write!(f, "{b} bundle(s) rejected"),
            (0, u) => write!(f, "{u} upstream source(s) not served"),
            (b, u) => write!(f, "{b} bundle(s) rejected and {u} upstream source(s) not served"),
        }
    }
}

/// The operator's notice (stderr) for each bundle or upstream a scan rejected, and for each
/// upstream's tools it left out (a warning: its other tools serve): the first scan's of every
/// command, and each later scan's of `serve` (a problem is reported once until the bundle's
/// files change; the last good version keeps serving).
pub fn report_rejections(report: &quiver_lifecycle::ScanReport) {
    for e in report.rejected.iter().chain(&report.warnings) {
        if e.stage == quiver_lifecycle::Stage::Upstream {
            crate::telemetry::notice("WARN", &format!("upstream {}: {}", e.bundle.display(), e.message));
        } else {
            crate::telemetry::notice(
                "WARN",
                &format!("rejected bundle {}: {} check failed: {}", e.bundle.display(), e.stage.as_str(), e.message),
            );
        }
    }
}

/// The isolation choices of the configuration, with key names turned into key ids and workers
/// started as `<this program> worker`.
fn isolation_policy(config: &HostConfig, trusted: &TrustedKeys, origin: &str) -> Result<IsolationPolicy> {
    let iso = &config.isolation;
    let key_id = |name: &str| trusted.iter().find(|k| k.name == name).map(|k| k.key.key_id());
    let mut keys = BTreeMap::new();
    for (name, i) in &iso.keys {
        let id =
            key_id(name).with_context(|| format!("{origin}: isolation.keys.{name}: no trusted key has that name"))?;
        keys.insert(id, *i);
    }
    let first_party = config
        .trusted_keys
        .iter()
        .filter(|k| k.first_party)
        .filter_map(|k| k.name.as_deref().and_then(key_id))
        .collect();
    let w = &iso.worker;
    let program = std::env::current_exe().context("cannot find this program to start worker processes")?;
    let mut worker = WorkerSettings::new(program);
    worker.max_memory_bytes = w.max_memory_mb.saturating_mul(1 << 20);
    worker.max_cpu_seconds = w.max_cpu_seconds;
    worker.kill_grace = Duration::from_millis(w.kill_grace_ms);
    worker.max_crashes = w.max_crashes.max(1);
    worker.crash_window = Duration::from_millis(w.crash_window_ms);
    for name in ["LANG", "LC_ALL", "TZ"].iter().map(|s| s.to_string()).chain(w.env.iter().cloned()) {
        if let Ok(v) = std::env::var(&name) {
            worker.env.push((name, v));
        }
    }
    Ok(IsolationPolicy {
        default: iso.default,
        plugins: iso.plugins.clone(),
        keys,
        first_party,
        worker: Some(worker),
        plugin_config: config.plugin_config.clone(),
        working_dir: std::env::current_dir().context("cannot determine the current folder")?,
        start_cache: None,
    })
}

/// The isolation policy of the built-in defaults (workers as `<this program> worker`, their
/// default limits), for loading a library that is not served: `quiver sign --report` reads no
/// host configuration and touches no host state.
pub fn default_isolation() -> Result<IsolationPolicy> {
    isolation_policy(&HostConfig::default(), &TrustedKeys::default(), "built-in defaults")
}

/// The `search:` section of `config` loaded (its model read from `base_dir`); `origin` names
/// the configuration in errors.
fn search_setup(config: &HostConfig, base_dir: &Path, origin: &str) -> Result<SearchSetup> {
    let mut search = SearchSetup::load(config.search.embedding.as_ref().map(|p| base_dir.join(p)).as_deref())
        .map_err(|e| anyhow::anyhow!("{origin}: search.embedding: {e}"))?;
    if let Some(weight) = config.search.semantic_weight {
        search = search.with_semantic_weight(weight as f32);
    }
    Ok(search)
}

/// Only the `search:` section of the configuration `quiver` would use (the built-in defaults:
/// lexical ranking), for measuring a tool list with the host's ranking without resolving the
/// rest of the configuration (no state folder, no keys, no plugins).
pub fn search_setup_only(g: &GlobalArgs) -> Result<SearchSetup> {
    let cwd = std::env::current_dir().context("cannot determine the current folder")?;
    let (config, config_path, base_dir) = locate_and_read(g, &cwd)?;
    let origin = config_path.map_or_else(|| "built-in defaults".to_owned(), |p| p.display().to_string());
    search_setup(&config, &base_dir, &origin)
}

/// The configuration file `quiver` uses (see [`crate::config_file::locate`]), read, with its
/// path as found and the folder its relative paths start from; the built-in defaults and
/// `cwd` when there is none.
fn locate_and_read(g: &GlobalArgs, cwd: &Path) -> Result<(HostConfig, Option<PathBuf>, PathBuf)> {
    match crate::config_file::locate(g.config.as_deref(), cwd)? {
        Some((path, _)) => {
            let config = read_config(&cwd.join(&path))?;
            let base_dir = absolute(cwd, path.parent().unwrap_or(Path::new("")));
            Ok((config, Some(path), base_dir))
        }
        None => {
            tracing::info!("no configuration file found; using the built-in defaults");
            Ok((HostConfig::default(), None, cwd.to_path_buf()))
        }
    }
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) }
}

fn read_config(path: &Path) -> Result<HostConfig> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let read = &e.as_bytes()[..at];
        let line = read.iter().filter(|b| **b == b'\n').count() + 1;
        let column = at - read.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) + 1;
        anyhow::anyhow!(
            "{}: not UTF-8 text: the byte at line {line}, column {column} (offset {at}) is not part of a UTF-8 character; save the file as UTF-8",
            path.display()
        )
    })?;
    Ok(crate::config_file::parse(path, &text, &path.display().to_string())?)
}

/// Plugin secrets per plugin id and name.
pub type PluginSecrets = BTreeMap<String, BTreeMap<String, Secret>>;

/// Per plugin id and secret name: whether the secret could be read (the error, without the value).
type SecretStatus = BTreeMap<String, BTreeMap<String, Result<(), String>>>;

/// Reads every configured plugin secret: the values read, and per secret whether it could be.
fn read_secrets(config: &HostConfig, base_dir: &Path) -> (PluginSecrets, SecretStatus) {
    let mut secrets: PluginSecrets = BTreeMap::new();
    let mut status: SecretStatus = BTreeMap::new();
    for (plugin, named) in &config.secrets {
        for (name, source) in named {
            let st = match source.resolve(base_dir) {
                Ok(value) => {
                    secrets.entry(plugin.clone()).or_default().insert(name.clone(), value);
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            };
            status.entry(plugin.clone()).or_default().insert(name.clone(), st);
        }
    }
    (secrets, status)
}

/// Reads every `trusted_keys` entry: inline keys, or key files relative to `base_dir`.
fn read_trusted_keys(config: &HostConfig, origin: &str, base_dir: &Path) -> Result<TrustedKeys> {
    let mut keys = TrustedKeys::new();
    for (n, source) in config.trusted_keys.iter().enumerate() {
        let at = format!("{origin}: trusted_keys[{n}]");
        let name = source.name.clone().unwrap_or_default();
        let (key, from) = match (&source.path, source.inline_key()) {
            (_, Some(inline)) => (inline.with_context(|| format!("{at}.key"))?, format!("{at}.key")),
            (Some(path), None) => {
                let file = base_dir.join(path);
                let text = match std::fs::read_to_string(&file) {
                    Ok(t) => t,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                        "{at}.path: trusted key file {} does not exist (resolved against the configuration's folder {}); \
                         run `cargo xtask build-plugins` to create the local development key, or make a key with `quiver keygen` and point `path` at its .pub file",
                        path.display(),
                        base_dir.display()
                    ),
                    Err(e) => bail!("{at}.path: cannot read the trusted key file {}: {e}", file.display()),
                };
                let key = PublicKey::parse(&text)
                    .with_context(|| format!("{at}.path: {} is not a minisign public key", file.display()))?;
                (key, file.display().to_string())
            }
            (None, None) => bail!("{at}: give `path` or `key`"),
        };
        match &source.plugins {
            Some(globs) => {
                keys.add_for(name, from, key, globs.clone());
            }
            None => {
                tracing::warn!(key = %key.key_id(), "{at}: this key may sign ANY plugin id; list the ids it may sign in `plugins` (globs)");
                keys.add(name, from, key);
            }
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
    }

    #[test]
    fn repository_config_is_valid() {
        let path = repo_root().join(crate::config_file::CONFIG_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        let config = HostConfig::from_yaml(&text, "quiver.yaml").unwrap();
        assert_eq!(config.plugins_dir, PathBuf::from("plugins"));
        assert!(!config.allow_unsigned, "the repository config must not allow unsigned bundles");
        assert_eq!(config.trusted_keys.len(), 1);
        assert_eq!(config.trusted_keys[0].path.as_deref(), Some(Path::new(".quiver-dev/dev.pub")));
        let agent = config.profile("agent").unwrap();
        assert_eq!(agent.scopes, ["*"]);
        let plan = config.profile("plan").unwrap();
        assert_eq!(plan.mode, quiver_manifest::ExposureMode::Lazy);
        assert!(!plan.scopes.iter().any(|s| s == "*"), "plan must be read-only");
        assert!(config.profiles.values().any(|p| !p.clients.is_empty()), "a profile for a known client");
    }

    #[test]
    fn missing_key_file_says_how_to_make_it() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            HostConfig::from_yaml("trusted_keys: [{name: dev, path: .quiver-dev/dev.pub}]\n", "q.yaml").unwrap();
        let err =
            Settings::resolve(config, Some("q.yaml".into()), dir.path().to_owned(), None).unwrap_err().to_string();
        assert!(err.contains("q.yaml: trusted_keys[0].path") && err.contains("cargo xtask build-plugins"), "{err}");
    }

    #[test]
    fn an_embedding_model_that_cannot_be_used_names_the_setting_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let config = HostConfig::from_yaml("search: {embedding: models/m}\n", "q.yaml").unwrap();
        let err =
            Settings::resolve(config, Some("q.yaml".into()), dir.path().to_owned(), None).unwrap_err().to_string();
        assert!(err.contains("q.yaml: search.embedding") && err.contains("models/m"), "{err}");
        if cfg!(feature = "semantic") {
            assert!(err.contains("not a folder") && err.contains("model.safetensors"), "{err}");
        } else {
            assert!(err.contains("`semantic` cargo feature"), "{err}");
        }
        let none = Settings::resolve(HostConfig::default(), None, dir.path().to_owned(), None).unwrap();
        assert!(!none.search.has_embedding());
    }

    /// A first start reads the configuration before its state folder exists; the record that
    /// its text passed the schema check is kept once `serve` has made that folder (opening its
    /// rollback record to raise it), so the next start skips the check. Loading the settings
    /// alone (every other command) creates no folder.
    #[test]
    fn a_first_serve_records_the_configuration_check_in_the_state_folder_it_creates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quiver.yaml");
        std::fs::write(&path, "state_dir: state\nrescan_interval_ms: 4321\n").unwrap();
        let g = crate::GlobalArgs { plugins: None, config: Some(path), json: false, verbose: 0, log_format: None };
        let record = dir.path().join("state").join(quiver_lifecycle::record::LOG_FILE);
        let mut s = Settings::load(&g).unwrap();
        assert_eq!(s.config.rescan_interval_ms, 4321);
        assert!(!dir.path().join("state").exists(), "loading the settings made the state folder");
        s.raise_rollback().unwrap();
        assert!(dir.path().join("state").is_dir(), "opening the rollback record to raise it makes the state folder");
        let kept = std::fs::read_to_string(&record).expect("the configuration check is recorded on a first load");
        assert_eq!(kept.lines().count(), 1, "{kept}");
        assert_eq!(kept.trim_end().len(), 64, "{kept}");
        // A second load of the same text in this process changes nothing.
        Settings::load(&g).unwrap().raise_rollback().unwrap();
        assert_eq!(std::fs::read_to_string(&record).unwrap(), kept);
    }

    #[test]
    fn paths_resolve_against_the_config_folder() {
        let dir = tempfile::tempdir().unwrap();
        let pair = quiver_manifest::KeyPair::generate();
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/a.pub"), pair.public_key_text()).unwrap();
        let config =
            HostConfig::from_yaml("plugins_dir: p\ntrusted_keys: [{name: a, path: keys/a.pub}]\n", "q.yaml").unwrap();
        let s = Settings::resolve(config, Some("q.yaml".into()), dir.path().to_owned(), None).unwrap();
        assert_eq!(s.host.plugins_dir, dir.path().join("p"));
        assert_eq!(s.key_name(&pair.key_id()), Some("a"));
        assert!(s.profile(Some("nope")).unwrap_err().is::<crate::UsageError>());
    }
}

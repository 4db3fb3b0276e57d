//! Tool sources: where plugin entries come from. [`BundleSource`] is the plugins folder: it
//! scans, verifies and loads bundles (in-process or in a worker process) and keeps the last good
//! state of each (plugin libraries and declarative adapter bundles alike). Upstream MCP servers
//! are the next source behind the same trait.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use quiver_catalog::{Catalog, ConflictPolicy, PluginEntry, Provenance};
use quiver_manifest::{Isolation, PathAccess, PathDefault, SandboxSpec};

use crate::bundle::{
    BundleError, Checked, DeferredBundle, Stage, VerifiedBundle, load_verified_report, signature_path,
    verify_bundle_with,
};
use crate::host::{HostSettings, ScanReport};
use crate::worker::protocol::{PathRule, SandboxRules};
use crate::worker::{WorkerBackend, WorkerSpec};

/// Which plugin serves each tool name, as a refresh sees it: the current catalog, minus the
/// plugins removed and plus the plugins accepted so far in this refresh. A source refuses a
/// newcomer that claims a name another plugin serves: the plugin already serving keeps it.
pub struct NameClaims<'a> {
    catalog: &'a Catalog,
    policy: ConflictPolicy,
    gone: BTreeSet<String>,
    added: BTreeMap<String, String>,
}

impl<'a> NameClaims<'a> {
    /// Claims as of `catalog`.
    pub fn new(catalog: &'a Catalog, policy: ConflictPolicy) -> NameClaims<'a> {
        NameClaims { catalog, policy, gone: BTreeSet::new(), added: BTreeMap::new() }
    }

    fn owner(&self, name: &str) -> Option<&str> {
        if let Some(id) = self.added.get(name) {
            return Some(id);
        }
        let r = self.catalog.resolve(name)?;
        let id = r.plugin.id();
        (!self.gone.contains(id)).then_some(id)
    }

    /// The first name of `entry` (tools and aliases) that another plugin serves, with its owner.
    /// Always `None` under [`ConflictPolicy::Namespace`] (both are exposed, namespaced).
    pub fn clash(&self, id: &str, manifest: &quiver_manifest::Manifest) -> Option<(String, String)> {
        if self.policy == ConflictPolicy::Namespace {
            return None;
        }
        let names =
            manifest.tools.iter().flat_map(|t| std::iter::once(&t.name).chain(t.aliases.iter().map(|a| &a.name)));
        for n in names {
            if let Some(owner) = self.owner(n)
                && owner != id
            {
                return Some((n.clone(), owner.to_owned()));
            }
        }
        None
    }

    /// `id` no longer serves anything.
    pub fn release(&mut self, id: &str) {
        self.gone.insert(id.to_owned());
        self.added.retain(|_, v| v != id);
    }

    /// A plugin whose worker is still starting claims the names of its verified manifest, so
    /// later bundles of the same scan see them taken ([`NameClaims::unclaim_pending`] if the
    /// worker then fails).
    fn claim_pending(&mut self, id: &str, manifest: &quiver_manifest::Manifest) {
        for t in &manifest.tools {
            self.added.insert(t.name.clone(), id.to_owned());
            for a in &t.aliases {
                self.added.insert(a.name.clone(), id.to_owned());
            }
        }
    }

    /// Drops the provisional claims of a plugin whose worker failed to start (the plugin it
    /// would have replaced, if any, keeps its names).
    fn unclaim_pending(&mut self, id: &str) {
        self.added.retain(|_, v| v != id);
    }

    /// `entry` now serves its names.
    pub fn claim(&mut self, entry: &PluginEntry) {
        self.release(entry.id());
        self.gone.remove(entry.id());
        for t in &entry.tools {
            self.added.insert(t.spec.name.clone(), entry.id().to_owned());
            for a in &t.spec.aliases {
                self.added.insert(a.name.clone(), entry.id().to_owned());
            }
        }
    }
}

/// A provider of plugin entries, merged by [`crate::Host`] into one catalog.
pub trait ToolSource: Send + Sync {
    /// Where the entries come from, for logs (`plugins folder /srv/quiver/plugins`).
    fn describe(&self) -> String;
    /// Brings the source up to date and says what changed. Must not block on I/O that may
    /// never complete.
    fn refresh(&self, claims: &mut NameClaims<'_>) -> ScanReport;
    /// The entries the source serves now.
    fn entries(&self) -> Vec<Arc<PluginEntry>>;
    /// Called once when the source joins a host: a source whose contents change on their own
    /// (an upstream server's tool list) calls [`RescanSignal::request`] so the host refreshes
    /// soon, instead of waiting for the next interval.
    fn attach(&self, _signal: crate::host::RescanSignal) {}
}

/// Identity of a file as `stat` sees it: cheap change detection without re-hashing. The mode
/// and the status-change time too: a `chmod` or `chown` alone leaves size and mtime as they
/// were, and permissions are part of a bundle's checks (`strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    mode: u32,
    ino: u64,
    dev: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = fs::symlink_metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        mode: m.mode(),
        ino: m.ino(),
        dev: m.dev(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    manifest: Option<Stamp>,
    signature: Option<Stamp>,
    library: Option<Stamp>,
}

fn fingerprint(manifest: &Path, library_file: Option<&str>) -> Fingerprint {
    Fingerprint {
        manifest: stamp(manifest),
        signature: stamp(&signature_path(manifest)),
        library: library_file.and_then(|f| stamp(&manifest.parent().unwrap_or(Path::new(".")).join(f))),
    }
}

#[derive(Debug)]
struct BundleState {
    /// The files as they were before the last check (never after: a bundle rewritten during a
    /// check must look changed on the next scan).
    fingerprint: Fingerprint,
    /// Library file name from the last parse, to stat it on the next scan.
    library_file: Option<String>,
    /// The plugin id this bundle currently provides (last good state), if any.
    loaded_id: Option<String>,
    /// The last rejection reported, so the same failure is reported once.
    last_error: Option<(Stage, String)>,
}

#[derive(Default)]
struct ScanState {
    bundles: BTreeMap<PathBuf, BundleState>,
    plugins: BTreeMap<String, Arc<PluginEntry>>,
    /// Libraries (`.so` files) seen without a manifest, reported once each.
    orphans: BTreeSet<PathBuf>,
    /// Symbolic links to folders in the plugins folder (not scanned), reported once each.
    linked: BTreeSet<PathBuf>,
}

/// Reports each path of `now` not in `reported`, once: `reported` keeps the paths still there,
/// so one that goes and comes back is reported again.
fn report_once(reported: &mut BTreeSet<PathBuf>, now: &[PathBuf], report: impl Fn(&Path)) {
    for p in now {
        if reported.insert(p.clone()) {
            report(p);
        }
    }
    reported.retain(|p| now.contains(p));
}

/// What a look at the plugins folder found ([`BundleSource::find`]).
struct Found {
    /// Manifests, sorted (a symbolic link named like one too: its check refuses it by name).
    manifests: Vec<PathBuf>,
    /// Libraries beside no manifest.
    orphans: Vec<PathBuf>,
    /// Symbolic links to folders, which are not scanned.
    linked: Vec<PathBuf>,
}

#[cfg(test)]
type CheckHook = Box<dyn FnMut(&Path) + Send>;

/// The plugins folder as a tool source.
pub struct BundleSource {
    settings: HostSettings,
    staging: Arc<crate::host::StagingDir>,
    state: Mutex<ScanState>,
    /// Plugins listed before their worker was up whose worker then failed to start: removed
    /// at the next scan (which the failure requests through `signal`).
    failed: Arc<Mutex<Vec<FailedStart>>>,
    signal: Mutex<Option<crate::host::RescanSignal>>,
    /// Runs right after each bundle's check (tests: files changing during a check).
    #[cfg(test)]
    after_check: Mutex<Option<CheckHook>>,
}

impl BundleSource {
    /// A source over `settings.plugins_dir`; nothing is read until the first refresh.
    pub fn new(settings: HostSettings, cache_dir: PathBuf) -> BundleSource {
        BundleSource::with_staging(settings, Arc::new(crate::host::StagingDir::Fixed(cache_dir)))
    }

    /// A source staging library copies (where memory files are unavailable) in `staging`.
    pub(crate) fn with_staging(settings: HostSettings, staging: Arc<crate::host::StagingDir>) -> BundleSource {
        BundleSource {
            settings,
            staging,
            state: Mutex::new(ScanState::default()),
            failed: Arc::new(Mutex::new(Vec::new())),
            signal: Mutex::new(None),
            #[cfg(test)]
            after_check: Mutex::new(None),
        }
    }

    /// Bundle manifests in the plugins folder, sorted: `*.tool.yaml` in it and in each direct
    /// subfolder (hidden entries skipped); with the libraries found beside no manifest.
    fn find(dir: &Path) -> std::io::Result<Found> {
        let mut manifests = Vec::new();
        let mut libraries = Vec::new();
        let mut linked = Vec::new();
        let name_of = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned).unwrap_or_default();
        let is_manifest = |n: &str| n.ends_with(".tool.yaml") && n.len() > ".tool.yaml".len();
        let is_library = |n: &str| n.ends_with(std::env::consts::DLL_SUFFIX);
        // A manifest that is a symbolic link is kept: its check (files are opened without
        // following links) refuses it with a reason, where passing it over would read as a
        // removed bundle (its last good version dropped) and its library as one without a
        // manifest.
        let mut visit = |p: PathBuf, t: fs::FileType| {
            let n = name_of(&p);
            if n.starts_with('.') || !(t.is_file() || t.is_symlink()) {
                return;
            }
            if is_manifest(&n) {
                manifests.push(p);
            } else if is_library(&n) && t.is_file() {
                libraries.push(p);
            }
        };
        let mut subdirs = Vec::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let ft = e.file_type()?;
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            if ft.is_dir() && !hidden {
                subdirs.push(e.path());
            } else if ft.is_symlink() && !hidden && e.path().is_dir() {
                linked.push(e.path());
            } else {
                visit(e.path(), ft);
            }
        }
        for d in subdirs {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                if let Ok(t) = e.file_type() {
                    visit(e.path(), t);
                }
            }
        }
        manifests.sort();
        // A library is an orphan when no manifest sits in its folder.
        let folders: BTreeSet<PathBuf> = manifests.iter().filter_map(|m| m.parent().map(Path::to_path_buf)).collect();
        libraries.retain(|l| l.parent().is_none_or(|p| !folders.contains(p)));
        libraries.sort();
        linked.sort();
        Ok(Found { manifests, orphans: libraries, linked })
    }

    /// Waits for workers still starting, in the order they were started, and records each.
    fn settle_workers(
        state: &mut ScanState,
        claims: &mut NameClaims<'_>,
        out: &mut Settled,
        starting: Vec<(Attempt, Starting)>,
    ) {
        for (attempt, worker) in starting {
            let id = worker.id.clone();
            let outcome = worker.finish(&attempt.path);
            if outcome.is_err() {
                claims.unclaim_pending(&id);
            }
            Self::settle(state, claims, out, attempt, outcome);
        }
    }

    /// Records one bundle's outcome in the scan state, the name claims and the report.
    fn settle(
        state: &mut ScanState,
        claims: &mut NameClaims<'_>,
        out: &mut Settled,
        attempt: Attempt,
        outcome: Result<Arc<PluginEntry>, (BundleError, Option<String>)>,
    ) {
        let Attempt { path, before, prev_lib, previous_id } = attempt;
        let report = &mut out.report;
        let entry = state.bundles.entry(path.clone()).or_insert(BundleState {
            fingerprint: before.clone(),
            library_file: None,
            loaded_id: None,
            last_error: None,
        });
        match outcome {
            Ok(plugin) => {
                let id = plugin.id().to_owned();
                let lib_file = plugin.manifest.artifact.as_ref().map(|a| a.file.clone());
                // The library's stamp from before the check when it was known then; else
                // now (the checksum just matched these bytes).
                entry.fingerprint = if prev_lib == lib_file {
                    before
                } else {
                    Fingerprint { library: fingerprint(&path, lib_file.as_deref()).library, ..before }
                };
                entry.library_file = lib_file;
                entry.loaded_id = Some(id.clone());
                entry.last_error = None;
                let new_version = plugin.manifest.version.to_string();
                // Raise the persistent rollback record (only after a successful load),
                // written once at the end of the scan.
                out.accepted.push(plugin.clone());
                if let Some(prev) = previous_id.filter(|p| *p != id) {
                    state.plugins.remove(&prev);
                    claims.release(&prev);
                    report.removed.push(prev);
                }
                claims.claim(&plugin);
                match state.plugins.insert(id.clone(), plugin.clone()) {
                    Some(old) if Arc::ptr_eq(&old, &plugin) => report.unchanged += 1,
                    Some(old) => {
                        tracing::info!(plugin = %id, from = %old.manifest.version, to = %new_version, "plugin hot-swapped");
                        report.replaced.push((id, old.manifest.version.to_string(), new_version));
                    }
                    None => {
                        tracing::info!(plugin = %id, version = %new_version, "plugin loaded");
                        report.added.push((id, new_version));
                    }
                }
            }
            Err((err, lib_file)) => {
                // Record what the files were BEFORE the check: if the bundle was being
                // written meanwhile, the next scan sees it changed and checks it again.
                entry.fingerprint = before;
                if lib_file.is_some() {
                    entry.library_file = lib_file;
                }
                let key = (err.stage, err.message.clone());
                if entry.last_error.as_ref() != Some(&key) {
                    // Target `quiver_lifecycle::reported`: the `quiver` commands print it
                    // themselves (`ScanReport::rejected`).
                    tracing::warn!(target: "quiver_lifecycle::reported", bundle = %path.display(), stage = err.stage.as_str(), error = %err.message, "bundle rejected; keeping the last good state");
                    entry.last_error = Some(key);
                    report.rejected.push(err);
                }
            }
        }
    }

    /// The checks of a verified bundle against the scan so far: not a duplicate id (of a loaded
    /// plugin or a worker still starting), no name another plugin serves.
    fn admit(
        &self,
        path: &Path,
        manifest: &quiver_manifest::Manifest,
        state: &ScanState,
        previous_id: Option<&str>,
        claims: &NameClaims<'_>,
        starting: &BTreeSet<String>,
    ) -> Result<(), BundleError> {
        let fail = |stage: Stage, message: String| BundleError { bundle: path.to_owned(), stage, message };
        let id = manifest.id.clone();
        // The same id from another bundle file is a duplicate, not a replacement.
        if previous_id != Some(id.as_str()) && starting.contains(&id) {
            return Err(fail(Stage::Catalog, format!("plugin id `{id}` is being loaded from another bundle")));
        }
        if previous_id != Some(id.as_str())
            && let Some(other) =
                state.bundles.iter().find(|(p, b)| p.as_path() != path && b.loaded_id.as_deref() == Some(id.as_str()))
        {
            return Err(fail(
                Stage::Catalog,
                format!("plugin id `{id}` is already loaded from {}; remove one of the two bundles", other.0.display()),
            ));
        }
        if let Some((name, owner)) = claims.clash(&id, manifest) {
            return Err(fail(
                Stage::Catalog,
                format!(
                    "tool name `{name}` is already served by plugin `{owner}`; the plugin already serving keeps its names. Rename the tool (or alias) in this bundle's tool.yaml, or set `name_conflicts: namespace` in quiver.yaml to serve both as `plugin-id.{name}`"
                ),
            ));
        }
        Ok(())
    }

    /// Bundle manifests in the plugins folder, sorted.
    pub fn find_manifests(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        Self::find(dir).map(|f| f.manifests)
    }

    /// Verifies and loads one bundle (no catalog build: name clashes are checked against
    /// `claims`). On failure, also returns the library file name learnt from the manifest.
    /// A bundle that runs in a worker process comes back [`Loaded::Starting`]: its worker
    /// starts on a thread of its own while the scan goes on; the scan waits for it before it
    /// ends. A plugin id in `starting` (a worker still starting) is refused at the
    /// [`Stage::Catalog`] stage like a loaded one: the caller settles the workers and asks again.
    fn try_load(
        &self,
        path: &Path,
        state: &ScanState,
        previous_id: Option<&str>,
        claims: &NameClaims<'_>,
        starting: &BTreeSet<String>,
    ) -> Result<Loaded, (BundleError, Option<String>)> {
        // A first load of a library whose load report an earlier start kept is listed from its
        // verified manifest and that report; an in-process library is read, checked and loaded
        // on the first call (`deferred.rs`), a worker's on its worker's first start (the thread
        // that starts it). Never for a replacement (hot swap).
        let policy = &self.settings.isolation;
        let defer = |manifest: &quiver_manifest::Manifest, signer: Option<&str>| {
            policy.start_cache.as_ref().is_some_and(|cache| {
                manifest.adapter.is_none()
                    && previous_id.is_none()
                    && !state.plugins.contains_key(&manifest.id)
                    && (policy.worker.is_some() || policy.choose(&manifest.id, signer) == Isolation::InProcess)
                    && manifest
                        .artifact
                        .as_ref()
                        .is_some_and(|a| a.report.is_some() || report_file(cache, &a.sha256).is_file())
            })
        };
        let verified = match verify_bundle_with(path, &self.settings.verify, &defer).map_err(|e| (e, None))? {
            Checked::Full(v) => v,
            Checked::Deferred(d) => {
                let lib_file = d.manifest.artifact.as_ref().map(|a| a.file.clone());
                self.admit(path, &d.manifest, state, previous_id, claims, starting)
                    .map_err(|e| (e, lib_file.clone()))?;
                if policy.choose(&d.manifest.id, d.signer_key_id.as_deref()) == Isolation::InProcess {
                    return self.list_in_process(d).map(Loaded::Ready).map_err(|e| (e, lib_file));
                }
                match self.list_worker(d) {
                    Ok(entry) => return Ok(Loaded::Ready(entry)),
                    // No usable report after all: verified in full and started as at a first start.
                    Err(d) => d.read().map_err(|e| (e, lib_file))?,
                }
            }
        };
        let lib_file = verified.manifest.artifact.as_ref().map(|a| a.file.clone());
        let fail =
            |stage: Stage, message: String| (BundleError { bundle: path.to_owned(), stage, message }, lib_file.clone());
        let id = verified.manifest.id.clone();
        self.admit(path, &verified.manifest, state, previous_id, claims, starting)
            .map_err(|e| (e, lib_file.clone()))?;
        if let Some(loaded) = state.plugins.get(&id) {
            if verified.manifest.version < loaded.manifest.version {
                return Err(fail(
                    Stage::Downgrade,
                    format!(
                        "version {} is lower than the loaded {}; downgrades are refused (bump the version, or remove the bundle and restart to roll back)",
                        verified.manifest.version, loaded.manifest.version
                    ),
                ));
            }
            if loaded.provenance.sha256 == verified.sha256 {
                // Same library bytes: nothing to load again. A changed manifest must still agree
                // with the library's embedded one, exactly as at start. (An adapter's sha256 is
                // its manifest's: same bytes, same adapter.)
                if verified.manifest.adapter.is_none() {
                    crate::library::check_embedded(&verified.manifest, &verified.manifest_sha256, &loaded.info)
                        .map_err(|(stage, m)| fail(stage, m))?;
                }
                return Ok(Loaded::Ready(loaded.clone()));
            }
        }
        let isolation = self.settings.isolation.choose(&id, verified.signer_key_id.as_deref());
        if verified.manifest.adapter.is_some() {
            return self.load_adapter(verified, isolation).map(Loaded::Ready).map_err(|e| (e, None));
        }
        match isolation {
            Isolation::InProcess => {
                self.load_in_process(verified).map(Loaded::Ready).map_err(|e| (e, lib_file.clone()))
            }
            Isolation::Process => {
                // Started before (its load report is kept): listed now, its worker starts
                // behind it. Never for a replacement: a hot swap waits for its new worker, so
                // a failed start keeps the version serving.
                let verified = match state.plugins.contains_key(&id) {
                    false => match self.load_listed(verified) {
                        Ok(entry) => return Ok(Loaded::Ready(entry)),
                        Err(v) => *v,
                    },
                    true => verified,
                };
                let manifest = verified.manifest.clone();
                let policy = self.settings.isolation.clone();
                let bundle = Arc::new(Mutex::new(Some(verified)));
                let take = bundle.clone();
                let start = move || {
                    let verified = take.lock().unwrap_or_else(|e| e.into_inner()).take();
                    verified.map(|v| load_in_worker(v, &policy))
                };
                match std::thread::Builder::new().name(format!("quiver-start-{id}")).spawn(start) {
                    Ok(thread) => Ok(Loaded::Starting(Box::new(Starting { id, manifest, lib_file, thread }))),
                    // No thread for it: start the worker here.
                    Err(_) => {
                        let verified = bundle.lock().unwrap_or_else(|e| e.into_inner()).take();
                        let policy = &self.settings.isolation;
                        match verified.map(|v| load_in_worker(v, policy)) {
                            Some(r) => r.map(Loaded::Ready).map_err(|e| (e, lib_file.clone())),
                            None => Err(fail(Stage::Worker, "the worker could not be started".into())),
                        }
                    }
                }
            }
        }
    }
}

/// What [`BundleSource::try_load`] made of an accepted bundle.
enum Loaded {
    /// Loaded (or unchanged): its entry.
    Ready(Arc<PluginEntry>),
    /// Its worker process is starting.
    Starting(Box<Starting>),
}

/// A worker starting on a thread of its own for a verified bundle.
struct Starting {
    id: String,
    /// The verified manifest (its names are claimed while the worker starts).
    manifest: quiver_manifest::Manifest,
    lib_file: Option<String>,
    thread: std::thread::JoinHandle<Option<Result<Arc<PluginEntry>, BundleError>>>,
}

impl Starting {
    /// Waits for the worker to load the plugin (its start timeout bounds the wait).
    fn finish(self, path: &Path) -> Result<Arc<PluginEntry>, (BundleError, Option<String>)> {
        let lost =
            |message: &str| BundleError { bundle: path.to_owned(), stage: Stage::Worker, message: message.into() };
        match self.thread.join() {
            Ok(Some(r)) => r.map_err(|e| (e, self.lib_file)),
            Ok(None) => Err((lost("the worker was started twice"), self.lib_file)),
            Err(_) => Err((lost("the thread starting the worker panicked"), self.lib_file)),
        }
    }
}

/// One bundle's attempt in a scan: what it was before and what it loaded as.
struct Attempt {
    path: PathBuf,
    before: Fingerprint,
    prev_lib: Option<String>,
    previous_id: Option<String>,
}

/// What a scan accumulates while bundles settle.
#[derive(Default)]
struct Settled {
    report: ScanReport,
    /// Plugins accepted by this scan (for the rollback record).
    accepted: Vec<Arc<PluginEntry>>,
}

/// A worker started for a plugin already listed that failed to start.
struct FailedStart {
    bundle: PathBuf,
    plugin: String,
    sha256: String,
    /// The failed check: [`Stage::Worker`] for a worker, the load's own for a library.
    stage: Stage,
    message: String,
}

/// How long the worker of a plugin listed from its kept load report waits before it starts when
/// no call asks for it first: the host's start and its client's handshake (a few ms) do not
/// share the CPU with the worker's exec, checks, sandbox and `dlopen`.
const DEFERRED_START_LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// The file of `start_cache` that keeps the load report of the library `sha256`.
fn report_file(cache: &Path, sha256: &str) -> PathBuf {
    cache.join(format!("{sha256}.json"))
}

/// Keeps a load report for the library `sha256` (best effort: without it the next start loads
/// the library, or waits for the worker, before `initialize`), with the digest of its check
/// against the signed manifest `manifest_sha256` (see [`checked_digest`]).
fn keep_report(cache: &Path, sha256: &str, report: &str, manifest_sha256: &str) {
    let file = report_file(cache, sha256);
    let written = fs::create_dir_all(cache).and_then(|()| crate::record::write(&file, report.as_bytes()));
    match written {
        Ok(()) => keep_checked(cache, &checked_digest(report, manifest_sha256)),
        Err(e) => tracing::debug!(file = %file.display(), error = %e, "cannot keep the load report"),
    }
}

/// The record log next to `start_cache` (`state_dir/checked.log` for `serve`) that keeps the
/// records of checks: the kept folder holds the load reports alone.
pub(crate) fn checked_log(cache: &Path) -> PathBuf {
    cache.with_file_name(crate::record::LOG_FILE)
}

/// What a kept report's check is recorded as: the sha256 of this host's version and ABI, the
/// sha256 of the signed manifest file the report was checked against, and the report's bytes.
/// Any change to one of them (a re-signed or edited manifest, another report, another host
/// build) gives another digest, and the report is checked in full again.
fn checked_digest(report: &str, manifest_sha256: &str) -> String {
    let abi = quiver_abi::ABI_VERSION.to_string();
    crate::record::digest("quiver kept report check", &[abi.as_bytes(), manifest_sha256.as_bytes(), report.as_bytes()])
}

/// Records a kept report's check, by its [`checked_digest`] (best effort: without it the next
/// start checks the report in full).
fn keep_checked(cache: &Path, digest: &str) {
    let file = checked_log(cache);
    if let Err(e) = crate::record::log(&file).add(digest) {
        tracing::debug!(file = %file.display(), error = %e, "cannot keep the check of the load report");
    }
}

/// The load report to list the library `sha256` from, and its parsed `PluginInfo`, when it is
/// usable for the signed manifest `manifest` (whose file's sha256 is `manifest_sha256`): the
/// report the bundle ships (`shipped`, checked against its signed sha256), else the one an
/// earlier start kept. When this host
/// recorded the check of exactly this report against exactly this manifest file, the embedded
/// manifest is not parsed and compared again here: the library's own report must still equal
/// this one byte for byte, and is checked against the signed manifest in full, before any call
/// is sent (at the first call's load, or the worker's start). Otherwise it is checked in full
/// now (and the check recorded). A report that fails is deleted; `None` then.
fn usable_report(
    cache: &Path,
    sha256: &str,
    manifest: &quiver_manifest::Manifest,
    manifest_sha256: &str,
    shipped: Option<&str>,
) -> Option<KeptReport> {
    let file = report_file(cache, sha256);
    let report = match shipped {
        Some(shipped) => shipped.to_owned(),
        None => fs::read_to_string(&file).ok()?,
    };
    let digest = checked_digest(&report, manifest_sha256);
    let checked = crate::record::log(&checked_log(cache)).contains(&digest);
    let info = crate::library::parse_info(&report).and_then(|info| {
        if !checked {
            crate::library::check_embedded(manifest, manifest_sha256, &info)?;
            keep_checked(cache, &digest);
        }
        Ok(info)
    });
    match info {
        Ok(info) => Some(KeptReport { report, info, recorded: checked }),
        Err(_) => {
            // Its record, if any, names these report bytes and this manifest: it matches nothing else.
            let _ = fs::remove_file(&file);
            None
        }
    }
}

/// A usable kept load report ([`usable_report`]).
struct KeptReport {
    /// The report's text, as the library gave it.
    report: String,
    /// The report parsed.
    info: quiver_abi::PluginInfo,
    /// Whether this host build recorded its check against exactly this signed manifest file
    /// (it built an entry from both before, so their schemas compile).
    recorded: bool,
}

/// The entry listed from a kept report's `info`: its schemas compiled on first use when the
/// report's check was `recorded` (they compiled at the load that kept it), else now.
fn listed_entry(
    recorded: bool,
    manifest: quiver_manifest::Manifest,
    info: &quiver_abi::PluginInfo,
    provenance: Provenance,
    backend: Arc<dyn quiver_catalog::ToolBackend>,
) -> Result<PluginEntry, quiver_catalog::EntryError> {
    if recorded {
        PluginEntry::new_compiled_on_use(manifest, info, provenance, backend)
    } else {
        PluginEntry::new(manifest, info, provenance, backend)
    }
}

impl BundleSource {
    /// Lists a verified worker bundle at once when its worker's load report for exactly these
    /// library bytes (sha256) was kept by an earlier start: see [`BundleSource::list_from_report`].
    /// Gives the bundle back when there is no usable report.
    fn load_listed(&self, bundle: VerifiedBundle) -> Result<Arc<PluginEntry>, Box<VerifiedBundle>> {
        let library = match bundle.library.try_clone() {
            Ok(l) => crate::worker::WorkerLibrary::verified(l),
            Err(_) => return Err(Box::new(bundle)),
        };
        let listing = Listing {
            manifest_path: &bundle.manifest_path,
            manifest: &bundle.manifest,
            sha256: &bundle.sha256,
            signer_key_id: bundle.signer_key_id.as_deref(),
            manifest_sha256: &bundle.manifest_sha256,
            shipped: bundle.report.as_deref(),
        };
        match self.list_from_report(listing, library, None) {
            Some(entry) => Ok(entry),
            None => Err(Box::new(bundle)),
        }
    }

    /// [`BundleSource::load_listed`] for a worker bundle verified with its library left unread:
    /// the worker's start reads the library, hashing it while it is streamed into its sealed
    /// memory file, and refuses it (at its stage, naming the bundle) unless its sha256 is the
    /// signed one; only those bytes are sent to the worker (which checks their sha256 again).
    /// Gives the bundle back when there is no usable report.
    fn list_worker(&self, bundle: DeferredBundle) -> Result<Arc<PluginEntry>, Box<DeferredBundle>> {
        let read: crate::worker::LibraryRead = Box::new(bundle.library_reader());
        let listing = Listing {
            manifest_path: &bundle.manifest_path,
            manifest: &bundle.manifest,
            sha256: &bundle.sha256,
            signer_key_id: bundle.signer_key_id.as_deref(),
            manifest_sha256: &bundle.manifest_sha256,
            shipped: bundle.report.as_deref(),
        };
        let library = crate::worker::WorkerLibrary::default();
        match self.list_from_report(listing, library, Some(read)) {
            Some(entry) => Ok(entry),
            None => Err(Box::new(bundle)),
        }
    }

    /// Lists a verified worker bundle from the load report an earlier start kept for exactly
    /// its library sha256: the entry is built from the verified manifest and that report
    /// (checked against the manifest as at a load), and the worker starts behind it. Calls wait
    /// for the worker within their deadline; the worker's own report must equal the kept one
    /// before any call is sent to it. If the worker (or, with `read`, the library's read and
    /// check) then fails, the plugin is removed at the next scan (requested at once). `None`
    /// when there is no usable report.
    fn list_from_report(
        &self,
        bundle: Listing<'_>,
        library: crate::worker::WorkerLibrary,
        read: Option<crate::worker::LibraryRead>,
    ) -> Option<Arc<PluginEntry>> {
        let policy = &self.settings.isolation;
        let (Some(cache), Some(settings)) = (&policy.start_cache, policy.worker.clone()) else {
            return None;
        };
        let file = report_file(cache, bundle.sha256);
        let KeptReport { report, info, recorded } =
            usable_report(cache, bundle.sha256, bundle.manifest, bundle.manifest_sha256, bundle.shipped)?;
        let spec = worker_spec(bundle.manifest, bundle.sha256, library, policy);
        let failed = self.failed.clone();
        let signal = self.signal.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let start = FailedStart {
            bundle: bundle.manifest_path.to_owned(),
            plugin: bundle.manifest.id.clone(),
            sha256: bundle.sha256.to_owned(),
            stage: Stage::Worker,
            message: String::new(),
        };
        let plugin = bundle.manifest.id.clone();
        let kept = file.clone();
        let manifest = bundle.manifest.clone();
        let manifest_sha256 = bundle.manifest_sha256.to_owned();
        let shipped = bundle.shipped.is_some();
        let check = move |ready: &crate::worker::protocol::Ready| {
            if ready.plugin_info != report {
                let _ = fs::remove_file(&kept);
                return Err(crate::bundle::report_mismatch(shipped));
            }
            // Listed on the recorded check of this report (the scan did not check it): checked
            // in full here, before any call is sent.
            let checked = if recorded {
                crate::library::parse_info(&report)
                    .and_then(|info| crate::library::check_embedded(&manifest, &manifest_sha256, &info))
            } else {
                Ok(())
            };
            if let Err((_, message)) = checked {
                let _ = fs::remove_file(&kept);
                return Err(message);
            }
            announce_sandbox(&plugin, &ready.sandbox);
            Ok(())
        };
        let on_failure = move |stage: Option<Stage>, message: String| {
            // A library that failed its read or checks: its stage, and the kept report goes.
            if stage.is_some() {
                let _ = fs::remove_file(&file);
            }
            let stage = stage.unwrap_or(Stage::Worker);
            tracing::error!(bundle = %start.bundle.display(), plugin = %start.plugin, stage = stage.as_str(), error = %message, "the worker of a listed plugin failed to start; its tools are removed");
            failed.lock().unwrap_or_else(|e| e.into_inner()).push(FailedStart { message, stage, ..start });
            if let Some(s) = signal {
                s.request();
            }
        };
        let backend =
            WorkerBackend::start_deferred(spec, settings, DEFERRED_START_LINGER, read, check, on_failure).ok()?;
        let provenance = Provenance {
            sha256: bundle.sha256.to_owned(),
            signer_key_id: bundle.signer_key_id.map(str::to_owned),
            manifest_path: bundle.manifest_path.display().to_string(),
        };
        tracing::info!(plugin = %bundle.manifest.id, "plugin listed; its worker process is starting");
        listed_entry(recorded, bundle.manifest.clone(), &info, provenance, Arc::new(backend)).map(Arc::new).ok()
    }

    /// Loads a verified in-process bundle now, and keeps its load report for the next start
    /// when this host keeps them (`IsolationPolicy::start_cache`).
    fn load_in_process(&self, bundle: VerifiedBundle) -> Result<Arc<PluginEntry>, BundleError> {
        let (sha256, manifest_sha256) = (bundle.sha256.clone(), bundle.manifest_sha256.clone());
        let (entry, report) = load_verified_report(bundle, &self.staging)?;
        if let Some(cache) = &self.settings.isolation.start_cache {
            keep_report(cache, &sha256, &report, &manifest_sha256);
        }
        Ok(entry)
    }

    /// Lists a verified in-process bundle whose library was left unread, from its verified
    /// manifest and the load report an earlier start kept for exactly the signed library sha256
    /// (checked against the manifest as at a load). The library is read, checked and loaded on
    /// the first call ([`crate::deferred::DeferredInProcess`]); if that fails, calls get
    /// `plugin_unavailable` and the plugin is removed at the next scan (requested at once).
    /// Without a usable report, the library is read and loaded now.
    fn list_in_process(&self, bundle: DeferredBundle) -> Result<Arc<PluginEntry>, BundleError> {
        let Some(cache) = &self.settings.isolation.start_cache else {
            return self.load_in_process(bundle.read()?);
        };
        let file = report_file(cache, &bundle.sha256);
        let usable =
            usable_report(cache, &bundle.sha256, &bundle.manifest, &bundle.manifest_sha256, bundle.report.as_deref());
        let Some(KeptReport { report, info, recorded }) = usable else {
            return self.load_in_process(bundle.read()?);
        };
        let failed = self.failed.clone();
        let signal = self.signal.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (plugin, sha256) = (bundle.manifest.id.clone(), bundle.sha256.clone());
        let on_failure: crate::deferred::OnFailure = Box::new(move |e: BundleError| {
            let start = FailedStart { bundle: e.bundle, plugin, sha256, stage: e.stage, message: e.message };
            failed.lock().unwrap_or_else(|e| e.into_inner()).push(start);
            if let Some(s) = signal {
                s.request();
            }
        });
        let provenance = Provenance {
            sha256: bundle.sha256.clone(),
            signer_key_id: bundle.signer_key_id.clone(),
            manifest_path: bundle.manifest_path.display().to_string(),
        };
        let manifest = bundle.manifest.clone();
        let manifest_path = bundle.manifest_path.clone();
        let backend =
            crate::deferred::DeferredInProcess::new(bundle, self.staging.clone(), report, recorded, file, on_failure);
        tracing::info!(plugin = %manifest.id, "plugin listed; its library is loaded on first use");
        listed_entry(recorded, manifest, &info, provenance, Arc::new(backend)).map(Arc::new).map_err(|e| BundleError {
            bundle: manifest_path,
            stage: Stage::Embedded,
            message: e.message,
        })
    }

    /// Removes the plugins whose worker failed to start after they were listed: their tools go,
    /// the bundle is reported rejected (by name, at the worker stage) and checked again when
    /// its files change.
    fn remove_failed_starts(&self, state: &mut ScanState, claims: &mut NameClaims<'_>, report: &mut ScanReport) {
        let failed = std::mem::take(&mut *self.failed.lock().unwrap_or_else(|e| e.into_inner()));
        for f in failed {
            let listed = state.plugins.get(&f.plugin).is_some_and(|p| p.provenance.sha256 == f.sha256);
            if !listed {
                continue;
            }
            state.plugins.remove(&f.plugin);
            claims.release(&f.plugin);
            report.removed.push(f.plugin.clone());
            if let Some(b) = state.bundles.get_mut(&f.bundle) {
                b.loaded_id = None;
                b.last_error = Some((f.stage, f.message.clone()));
            }
            report.rejected.push(BundleError { bundle: f.bundle, stage: f.stage, message: f.message });
        }
    }
}

/// The parts of a verified bundle a worker listed from its kept report needs.
struct Listing<'a> {
    manifest_path: &'a Path,
    manifest: &'a quiver_manifest::Manifest,
    sha256: &'a str,
    signer_key_id: Option<&'a str>,
    manifest_sha256: &'a str,
    /// The load report the bundle ships, if any.
    shipped: Option<&'a str>,
}

/// What a worker is sent for a verified bundle (its verified `library`), and how it is started.
fn worker_spec(
    manifest: &quiver_manifest::Manifest,
    sha256: &str,
    library: crate::worker::WorkerLibrary,
    policy: &crate::IsolationPolicy,
) -> WorkerSpec {
    let sandbox = sandbox_rules(&manifest.sandbox, policy.plugin_config.get(&manifest.id), &policy.working_dir);
    let inline = manifest
        .tools
        .iter()
        .filter(|t| t.policies.effective(t.side_effects).execution == quiver_manifest::Execution::Inline)
        .map(|t| t.name.clone())
        .collect();
    WorkerSpec { plugin: manifest.id.clone(), library, sha256: sha256.to_owned(), sandbox, inline, adapter: None }
}

/// The load check of `quiver verify`: a verified bundle is opened in a worker process of its
/// own (in its sandbox, whatever the isolation policy says, so no plugin code runs in the
/// caller) and its entry is built exactly as for serving: ABI, embedded manifest, every tool of
/// the manifest implemented by the library and no other, actions, schemas that compile. The
/// worker exits when the check is done.
pub fn check_in_worker(bundle: VerifiedBundle, policy: &crate::IsolationPolicy) -> Result<(), BundleError> {
    load_in_worker(bundle, policy).map(drop)
}

/// The load report of a library about to be signed (`quiver sign --report`): the library at
/// `library_path` is opened in a worker process of its own, in its sandbox (never in the
/// caller), and checked against `manifest` exactly as for serving (ABI, embedded manifest, every
/// tool of the manifest implemented by the library and no other, actions, schemas that compile).
/// Gives back the report as the library wrote it, to ship in the bundle. The worker exits when
/// the check is done; nothing is kept.
pub fn describe_in_worker(
    manifest_path: &Path,
    manifest: quiver_manifest::Manifest,
    library_path: &Path,
    policy: &crate::IsolationPolicy,
) -> Result<String, BundleError> {
    let max_bytes = crate::VerifyPolicy::default().max_library_bytes;
    let bundle = crate::bundle::unsigned_bundle(manifest_path, manifest, library_path, max_bytes)?;
    let policy = crate::IsolationPolicy { start_cache: None, ..policy.clone() };
    start_in_worker(bundle, &policy).map(|(_, report)| report)
}

/// Starts a worker process for a verified bundle and builds its entry from what the worker
/// reports.
fn load_in_worker(bundle: VerifiedBundle, policy: &crate::IsolationPolicy) -> Result<Arc<PluginEntry>, BundleError> {
    start_in_worker(bundle, policy).map(|(entry, _)| entry)
}

/// [`load_in_worker`], also giving back the library's load report.
fn start_in_worker(
    bundle: VerifiedBundle,
    policy: &crate::IsolationPolicy,
) -> Result<(Arc<PluginEntry>, String), BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: bundle.manifest_path.clone(), stage, message };
    let Some(settings) = policy.worker.clone() else {
        return Err(fail(
            Stage::Worker,
            "this bundle must run in a worker process, but this host has no worker program configured; run it with the `quiver` binary, or set `isolation.plugins.<id>: in_process` for a plugin you trust".into(),
        ));
    };
    let library = bundle
        .library
        .try_clone()
        .map_err(|e| fail(Stage::Library, format!("cannot keep the verified library to send it to the worker: {e}")))?;
    let spec = worker_spec(&bundle.manifest, &bundle.sha256, crate::worker::WorkerLibrary::verified(library), policy);
    let (backend, ready) = WorkerBackend::start(spec, settings).map_err(|m| fail(Stage::Worker, m))?;
    crate::bundle::check_shipped_report(bundle.report.as_deref(), &ready.plugin_info)
        .map_err(|m| fail(Stage::Embedded, m))?;
    let info = crate::library::parse_info(&ready.plugin_info)
        .and_then(|info| {
            crate::library::check_embedded(&bundle.manifest, &bundle.manifest_sha256, &info).map(|()| info)
        })
        .map_err(|(s, m)| fail(s, m))?;
    let provenance = Provenance {
        sha256: bundle.sha256.clone(),
        signer_key_id: bundle.signer_key_id,
        manifest_path: bundle.manifest_path.display().to_string(),
    };
    announce_sandbox(&bundle.manifest.id, &ready.sandbox);
    let entry = PluginEntry::new(bundle.manifest, &info, provenance, Arc::new(backend))
        .map(Arc::new)
        .map_err(|e| fail(Stage::Embedded, e.message))?;
    if let Some(cache) = &policy.start_cache {
        keep_report(cache, &bundle.sha256, &ready.plugin_info, &bundle.manifest_sha256);
    }
    Ok((entry, ready.plugin_info))
}

/// Logs where a worker plugin runs (and, once per host, loudly, when workers are not sandboxed).
fn announce_sandbox(plugin: &str, sandbox: &str) {
    if sandbox.starts_with("NOT SANDBOXED") {
        // Said once per host, loudly; `quiver list` repeats it per plugin.
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| tracing::warn!(detail = %sandbox, "worker plugins run WITHOUT a file and network sandbox on this machine (process isolation and limits still apply)"));
    }
    tracing::info!(plugin = %plugin, sandbox = %sandbox, "plugin runs in a worker process");
}

impl BundleSource {
    /// Builds the entry of a verified adapter bundle: resolves it against this host (program,
    /// environment, header secrets), then runs it in the host or in a worker process that
    /// enters the bundle's sandbox first (the program's file and, for HTTP, name resolution
    /// files are added to the declared paths).
    fn load_adapter(&self, bundle: VerifiedBundle, isolation: Isolation) -> Result<Arc<PluginEntry>, BundleError> {
        let fail = |stage: Stage, message: String| BundleError { bundle: bundle.manifest_path.clone(), stage, message };
        let manifest = &bundle.manifest;
        let label = manifest.adapter.as_ref().map(|a| a.label()).unwrap_or("adapter");
        let policy = &self.settings.isolation;
        let resolved = crate::adapter::resolve(manifest, &policy.working_dir, |k| std::env::var(k).ok())
            .map_err(|e| fail(Stage::Adapter, e))?;
        let backend: Arc<dyn quiver_catalog::ToolBackend> = match isolation {
            Isolation::InProcess => Arc::new(
                crate::adapter::Adapter::new(manifest, resolved, crate::adapter::in_process_placement(label))
                    .map_err(|e| fail(Stage::Adapter, e))?,
            ),
            Isolation::Process => {
                let Some(settings) = policy.worker.clone() else {
                    return Err(fail(
                        Stage::Worker,
                        "this adapter bundle must run in a worker process, but this host has no worker program configured; run it with the `quiver` binary, or set `isolation.plugins.<id>: in_process` for an adapter you trust".into(),
                    ));
                };
                let mut sandbox =
                    sandbox_rules(&manifest.sandbox, policy.plugin_config.get(&manifest.id), &policy.working_dir);
                if let Some(p) = &resolved.program {
                    sandbox.paths.push(PathRule { path: p.clone(), write: false });
                }
                if manifest.sandbox.network {
                    for f in crate::adapter::NAME_RESOLUTION_FILES.iter().chain(crate::adapter::TRUST_STORE_PATHS) {
                        if Path::new(f).exists() {
                            sandbox.paths.push(PathRule { path: (*f).to_owned(), write: false });
                        }
                    }
                }
                // Exactly the verified bytes (never re-read from the bundle folder).
                let Some(text) = bundle.library.to_vec().ok().and_then(|b| String::from_utf8(b).ok()) else {
                    return Err(fail(Stage::Manifest, "the manifest is not UTF-8 text".into()));
                };
                let spec = WorkerSpec {
                    plugin: manifest.id.clone(),
                    library: crate::worker::WorkerLibrary::default(),
                    sha256: bundle.sha256.clone(),
                    sandbox,
                    inline: Vec::new(),
                    adapter: Some(crate::worker::AdapterLoad { manifest: text, resolved }),
                };
                let (backend, ready) = WorkerBackend::start(spec, settings).map_err(|m| fail(Stage::Worker, m))?;
                tracing::info!(plugin = %manifest.id, sandbox = %ready.sandbox, "adapter runs in a worker process");
                Arc::new(backend)
            }
        };
        let info = crate::adapter::plugin_info(manifest);
        let provenance = Provenance {
            sha256: bundle.sha256.clone(),
            signer_key_id: bundle.signer_key_id.clone(),
            manifest_path: bundle.manifest_path.display().to_string(),
        };
        let mut entry = PluginEntry::new(bundle.manifest.clone(), &info, provenance, backend)
            .map_err(|e| fail(Stage::Manifest, e.message))?;
        entry.source = label.to_owned();
        Ok(Arc::new(entry))
    }
}

/// The sandbox of a plugin: its manifest's declarations resolved against the operator's
/// `plugin_config` and the host's working folder.
pub fn sandbox_rules(spec: &SandboxSpec, config: Option<&serde_json::Value>, working_dir: &Path) -> SandboxRules {
    let mut paths = Vec::new();
    for g in &spec.filesystem {
        let raw: Option<PathBuf> = match (&g.path, &g.config) {
            (Some(p), _) => Some(PathBuf::from(p)),
            (None, Some(key)) => match config.and_then(|c| c.get(key)).and_then(|v| v.as_str()) {
                Some(v) => Some(working_dir.join(v)),
                None => match g.default {
                    Some(PathDefault::WorkingDir) => Some(working_dir.to_owned()),
                    Some(PathDefault::None) | None => None,
                },
            },
            (None, None) => None,
        };
        if let Some(p) = raw {
            let p = fs::canonicalize(&p).unwrap_or(p);
            paths.push(PathRule { path: p.display().to_string(), write: g.access == PathAccess::ReadWrite });
        }
    }
    SandboxRules { paths, network: spec.network }
}

impl ToolSource for BundleSource {
    fn describe(&self) -> String {
        format!("plugins folder {}", self.settings.plugins_dir.display())
    }

    fn attach(&self, signal: crate::host::RescanSignal) {
        *self.signal.lock().unwrap_or_else(|e| e.into_inner()) = Some(signal);
    }

    fn entries(&self) -> Vec<Arc<PluginEntry>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).plugins.values().cloned().collect()
    }

    /// Scans the plugins folder once: loads added bundles, hot-swaps replaced ones, drops removed
    /// ones. A bundle that fails any check keeps its last good version (if it had one) and is
    /// reported once until its files change again. Unchanged bundles cost a few `stat` calls.
    fn refresh(&self, claims: &mut NameClaims<'_>) -> ScanReport {
        let mut report = ScanReport::default();
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        let Found { manifests: found, orphans, linked } = match Self::find(&self.settings.plugins_dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(dir = %self.settings.plugins_dir.display(), error = %e, "cannot read the plugins folder; keeping the current catalog");
                return report;
            }
        };
        report_once(&mut state.orphans, &orphans, |lib| {
            // Its own target: nothing else reports this one.
            tracing::warn!(
                target: "quiver::plugins",
                library = %lib.display(),
                "a plugin library without a manifest is ignored: a bundle is the library, its NAME.tool.yaml (with artifact.sha256) and NAME.tool.yaml.minisig in one folder; build one with `cargo xtask build-plugins` or `quiver sign --library`"
            );
        });
        report_once(&mut state.linked, &linked, |folder| {
            tracing::warn!(
                target: "quiver::plugins",
                folder = %folder.display(),
                "a symbolic link to a folder in the plugins folder is not scanned (bundle files are read as regular files, never through links): copy or move the bundle folder itself into the plugins folder"
            );
        });
        self.remove_failed_starts(state, claims, &mut report);

        // Removals first, so a bundle renamed within one scan is not seen as a duplicate.
        let gone: Vec<PathBuf> = state.bundles.keys().filter(|p| !found.contains(p)).cloned().collect();
        for p in gone {
            if let Some(b) = state.bundles.remove(&p)
                && let Some(id) = b.loaded_id
            {
                state.plugins.remove(&id);
                claims.release(&id);
                tracing::info!(plugin = %id, bundle = %p.display(), "bundle removed; its tools are gone");
                report.removed.push(id);
            }
        }

        // Oldest manifests first: when two bundles claim one name in the same scan (at start),
        // the one that was there first keeps it and the newcomer is refused. Workers start in
        // parallel with the rest of the scan; a bundle refused at the catalog stage while some
        // are starting is asked again once they have settled, so the outcome is the one of a
        // scan that waited for each worker in turn.
        let mut found = found;
        let mut out = Settled { report, accepted: Vec::new() };
        let mut starting: Vec<(Attempt, Starting)> = Vec::new();
        found.sort_by_cached_key(|p| (stamp(p).map(|s| s.mtime_ns).unwrap_or(i128::MAX), p.clone()));
        for path in found {
            let prev_lib = state.bundles.get(&path).and_then(|b| b.library_file.clone());
            let before = fingerprint(&path, prev_lib.as_deref());
            if let Some(b) = state.bundles.get(&path)
                && b.fingerprint == before
                && !b.last_error.as_ref().is_some_and(|(stage, _)| stage.depends_on_the_host())
            {
                out.report.unchanged += 1;
                continue;
            }
            let previous_id = state.bundles.get(&path).and_then(|b| b.loaded_id.clone());
            let attempt = Attempt { path, before, prev_lib, previous_id };
            let ids = |s: &[(Attempt, Starting)]| s.iter().map(|(_, w)| w.id.clone()).collect::<BTreeSet<_>>();
            let mut outcome =
                self.try_load(&attempt.path, state, attempt.previous_id.as_deref(), claims, &ids(&starting));
            if matches!(&outcome, Err((e, _)) if e.stage == Stage::Catalog) && !starting.is_empty() {
                Self::settle_workers(state, claims, &mut out, std::mem::take(&mut starting));
                outcome = self.try_load(&attempt.path, state, attempt.previous_id.as_deref(), claims, &BTreeSet::new());
            }
            #[cfg(test)]
            if let Some(hook) = self.after_check.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                hook(&attempt.path);
            }
            match outcome {
                Ok(Loaded::Starting(w)) => {
                    claims.claim_pending(&w.id, &w.manifest);
                    starting.push((attempt, *w));
                }
                Ok(Loaded::Ready(plugin)) => Self::settle(state, claims, &mut out, attempt, Ok(plugin)),
                Err(e) => Self::settle(state, claims, &mut out, attempt, Err(e)),
            }
        }
        Self::settle_workers(state, claims, &mut out, starting);
        let Settled { report, accepted } = out;
        // One write (and fsync) of the rollback record per scan, before the host publishes
        // the new catalog, so no call reaches a version the record does not hold yet.
        if let Some(store) = &self.settings.verify.rollback
            && !accepted.is_empty()
            && let Err(e) =
                store.record_all(accepted.iter().map(|p| (p.id(), &p.manifest.version, p.provenance.sha256.as_str())))
        {
            tracing::error!(error = %e, "cannot update the rollback record");
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_manifest::{PublicKey, TrustedKeys};
    use quiver_tests::{TestKey, plugin_library, write_bundle, write_bundle_shipping};

    /// Whether a first load compiled exactly the input schemas it cannot show compile (a bad
    /// one refuses the plugin there); one known to compile is compiled by its first use.
    fn compiled_as_due(src: &BundleSource) -> bool {
        src.entries()[0]
            .tools
            .iter()
            .all(|t| t.input_validator.is_compiled() != quiver_catalog::shape::Shape::known_to_compile(&t.input_schema))
    }

    /// A `marker_echo` request for "hi there", as the router sends it across the ABI.
    fn marker_echo_request() -> String {
        serde_json::to_string(&quiver_abi::ToolRequest {
            request_id: "t".into(),
            tool_id: "marker_echo".into(),
            tool_version: "0.1.0".into(),
            inputs: serde_json::json!({"text": "hi there"}),
            ..quiver_abi::ToolRequest::default()
        })
        .unwrap()
    }

    fn source(plugins: &Path, key: &TestKey) -> BundleSource {
        let mut trusted = TrustedKeys::default();
        trusted.add("test", "test", PublicKey::parse(&key.public_text()).unwrap());
        let settings = HostSettings {
            plugins_dir: plugins.to_owned(),
            verify: crate::VerifyPolicy { trusted, max_library_bytes: 256 << 20, ..crate::VerifyPolicy::default() },
            cache_dir: None,
            conflicts: ConflictPolicy::Error,
            isolation: Default::default(),
        };
        BundleSource::new(settings, plugins.join(".cache"))
    }

    /// A bundle caught half-written (its new signature lands while the check runs) must be
    /// checked again at the next scan, not recorded as seen: the fingerprint is the one taken
    /// before the check.
    #[test]
    fn a_bundle_finished_during_its_check_loads_at_the_next_scan() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let key = TestKey::generate();
        let bundle = write_bundle(&plugins, "marker-plugin", &plugin_library("marker-plugin", &[]), None, Some(&key));
        // Half-written: the signature is not there yet.
        let signature = std::fs::read(&bundle.signature).unwrap();
        std::fs::remove_file(&bundle.signature).unwrap();
        let src = source(&plugins, &key);
        let sig_path = bundle.signature.clone();
        *src.after_check.lock().unwrap() = Some(Box::new(move |_| {
            // The writer finishes while the host is still looking at the old state.
            if !sig_path.exists() {
                std::fs::write(&sig_path, &signature).unwrap();
            }
        }));
        let empty = Catalog::empty();
        let first = src.refresh(&mut NameClaims::new(&empty, ConflictPolicy::Error));
        assert_eq!(first.rejected.len(), 1, "{first:?}");
        assert_eq!(first.rejected[0].stage, Stage::Signature);
        let second = src.refresh(&mut NameClaims::new(&empty, ConflictPolicy::Error));
        assert_eq!(second.added, vec![("marker-plugin".to_owned(), "0.1.0".to_owned())], "{second:?}");
        // And a failure that does not change is reported once, not at every scan.
        let third = src.refresh(&mut NameClaims::new(&empty, ConflictPolicy::Error));
        assert!(third.rejected.is_empty() && !third.changed(), "{third:?}");
    }

    /// A newcomer claiming a name another plugin serves is refused with a message naming that
    /// plugin; the plugin serving keeps its tools, now and after a restart (where the bundle
    /// that was there first wins, whatever the path order).
    #[test]
    fn a_name_clash_refuses_the_newcomer_and_keeps_the_plugin_serving() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let key = TestKey::generate();
        let lib = plugin_library("marker-plugin", &[]);
        write_bundle(&plugins.join("marker"), "marker-plugin", &lib, None, Some(&key));
        let src = source(&plugins, &key);
        let first = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(first.added.len(), 1, "{first:?}");
        let serving = Catalog::build(src.entries(), ConflictPolicy::Error).unwrap();
        // "a-impostor" sorts before "marker": path order must not matter.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let manifest =
            std::fs::read_to_string(quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml"))
                .unwrap()
                .replacen("id: marker-plugin", "id: impostor", 1);
        write_bundle(&plugins.join("a-impostor"), "marker-plugin", &lib, Some(&manifest), Some(&key));
        let second = src.refresh(&mut NameClaims::new(&serving, ConflictPolicy::Error));
        assert_eq!(second.rejected.len(), 1, "{second:?}");
        let e = &second.rejected[0];
        assert_eq!(e.stage, Stage::Catalog);
        assert!(e.message.contains("`marker_echo` is already served by plugin `marker-plugin`"), "{}", e.message);
        assert!(e.message.contains("name_conflicts: namespace"), "{}", e.message);
        assert!(second.removed.is_empty());
        assert_eq!(src.entries().len(), 1);
        // A restart: both bundles are found in one scan; the older one keeps its names.
        let restarted = source(&plugins, &key);
        let r = restarted.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(r.added, vec![("marker-plugin".to_owned(), "0.1.0".to_owned())], "{r:?}");
        assert_eq!(r.rejected.len(), 1, "{r:?}");
    }

    /// A bundle refused because of another bundle (here: the same plugin id, already loaded from
    /// another folder) is checked again at each rescan, files unchanged: it loads once the other
    /// is gone, and its refusal is reported once, not at every scan while it lasts.
    #[test]
    fn a_bundle_refused_because_of_another_loads_once_the_other_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let key = TestKey::generate();
        let lib = plugin_library("marker-plugin", &[]);
        write_bundle(&plugins.join("first"), "marker-plugin", &lib, None, Some(&key));
        let src = source(&plugins, &key);
        let claims = |src: &BundleSource| Catalog::build(src.entries(), ConflictPolicy::Error).unwrap();
        let first = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(first.added.len(), 1, "{first:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_bundle(&plugins.join("second"), "marker-plugin", &lib, None, Some(&key));
        let serving = claims(&src);
        let second = src.refresh(&mut NameClaims::new(&serving, ConflictPolicy::Error));
        assert_eq!(second.rejected.len(), 1, "{second:?}");
        assert!(second.rejected[0].message.contains("already loaded from"), "{second:?}");
        // While it lasts: not reported again.
        let third = src.refresh(&mut NameClaims::new(&serving, ConflictPolicy::Error));
        assert!(third.rejected.is_empty() && third.added.is_empty(), "{third:?}");
        // The first bundle goes: the second loads in the same scan, its files untouched.
        std::fs::remove_dir_all(plugins.join("first")).unwrap();
        let fourth = src.refresh(&mut NameClaims::new(&serving, ConflictPolicy::Error));
        assert_eq!(fourth.removed, vec!["marker-plugin".to_owned()], "{fourth:?}");
        assert_eq!(fourth.added, vec![("marker-plugin".to_owned(), "0.1.0".to_owned())], "{fourth:?}");
        assert_eq!(src.entries().len(), 1);
    }

    /// An adapter refused because its program is not installed loads at the next rescan once
    /// the program is there, with no change to the bundle (the refusal's own fix says to
    /// install it).
    #[test]
    fn an_adapter_refused_for_a_missing_program_loads_once_it_is_installed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let program = dir.path().join("bin/late-prog");
        let manifest = format!(
            "manifest_version: 1\nid: late-tools\nversion: 0.1.0\ndisplay_name: Late\ndescription: A late program.\nabi: 1\n\
             adapter:\n  command:\n    program: {}\ntools:\n  - name: late_run\n    title: Late\n    description: Runs it.\n    side_effects: read\n    input_schema: {{type: object}}\n    invoke: {{args: []}}\n",
            program.display()
        );
        let key = TestKey::generate();
        let bundle = plugins.join("late-tools");
        std::fs::create_dir_all(&bundle).unwrap();
        let path = bundle.join("late-tools.tool.yaml");
        std::fs::write(&path, &manifest).unwrap();
        std::fs::write(
            crate::signature_path(&path),
            quiver_manifest::sign_bundle(&key.pair, &manifest, "late").unwrap(),
        )
        .unwrap();
        let src = source(&plugins, &key);
        let first = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(first.rejected.len(), 1, "{first:?}");
        assert_eq!(first.rejected[0].stage, Stage::Adapter, "{first:?}");
        std::fs::create_dir_all(program.parent().unwrap()).unwrap();
        std::fs::write(&program, "#!/bin/sh\necho late\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let second = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(second.added, vec![("late-tools".to_owned(), "0.1.0".to_owned())], "{second:?}");
    }

    /// A scan that accepts several bundles writes (and fsyncs) the rollback record once, with
    /// every accepted plugin in it; a scan that changes nothing does not write it again.
    #[test]
    fn a_scan_writes_the_rollback_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let key = TestKey::generate();
        let packages = ["marker-plugin", "fault-plugin"];
        for p in packages {
            write_bundle(&plugins.join(p), p, &plugin_library(p, &[]), None, Some(&key));
        }
        let mut src = source(&plugins, &key);
        let state = dir.path().join("state");
        let store = Arc::new(crate::RollbackStore::open(&state).unwrap());
        src.settings.verify.rollback = Some(store.clone());
        let empty = Catalog::empty();
        let first = src.refresh(&mut NameClaims::new(&empty, ConflictPolicy::Error));
        assert_eq!(first.added.len(), 2, "{first:?}");
        assert_eq!(store.writes.load(std::sync::atomic::Ordering::Relaxed), 1);
        let reopened = crate::RollbackStore::open(&state).unwrap();
        for id in first.added.iter().map(|(id, _)| id) {
            assert!(reopened.get(id).is_some(), "{id} is missing from the record");
        }
        let serving = Catalog::build(src.entries(), ConflictPolicy::Error).unwrap();
        let second = src.refresh(&mut NameClaims::new(&serving, ConflictPolicy::Error));
        assert!(!second.changed(), "{second:?}");
        assert_eq!(store.writes.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
    /// A kept load report is listed on the recorded check of exactly that report against
    /// exactly that signed manifest file. A manifest re-signed with other content gets the report
    /// checked in full at the scan (it no longer agrees: refused and deleted, the library loaded
    /// and refused by name); and even a forged record that lets the scan list it cannot reach the
    /// library: the first call checks the report against the signed manifest in full first.
    #[test]
    fn a_kept_report_is_listed_on_its_recorded_check_only_for_the_manifest_it_was_checked_against() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        let cache = dir.path().join("worker-info");
        let key = TestKey::generate();
        let lib = plugin_library("marker-plugin", &[]);
        let bundle = write_bundle(&plugins, "marker-plugin", &lib, None, Some(&key));
        let start = || {
            let mut src = source(&plugins, &key);
            src.settings.isolation.start_cache = Some(cache.clone());
            src.settings.verify.checked_manifests = Some(checked_log(&cache));
            let report = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
            (src, report)
        };
        let echo = marker_echo_request();
        let (first, added) = start();
        assert_eq!(added.added.len(), 1, "{added:?}");
        assert!(compiled_as_due(&first), "a first load compiles the schemas not known to compile, and only those");
        let sha256 = first.entries()[0].provenance.sha256.clone();
        let report = fs::read_to_string(report_file(&cache, &sha256)).unwrap();
        let manifest_sha256 = quiver_manifest::sha256_hex(&fs::read(&bundle.manifest).unwrap());
        // The records, as a new process reads them (one line each in the state folder's log).
        let recorded = || fs::read_to_string(checked_log(&cache)).unwrap_or_default();
        let lines = recorded();
        let lines: Vec<&str> = lines.lines().collect();
        assert!(
            lines.contains(&checked_digest(&report, &manifest_sha256).as_str()),
            "the first load records its check"
        );
        assert!(
            !lines.contains(&checked_digest(&report, &"0".repeat(64)).as_str()),
            "the record is bound to the manifest"
        );
        assert_eq!(fs::read_dir(&cache).unwrap().count(), 1, "the kept folder holds the load report alone");
        assert!(
            lines.contains(&crate::bundle::manifest_check_digest(&manifest_sha256).as_str()),
            "the signed manifest's check is recorded by its sha256"
        );
        assert_eq!(lines.len(), 2, "{lines:?}");

        // A warm start: listed from the report, and the first call loads and answers.
        let (warm, listed) = start();
        assert_eq!(listed.added.len(), 1, "{listed:?}");
        let tools = &warm.entries()[0].tools;
        assert!(tools.iter().all(|t| !t.input_validator.is_compiled()), "listed on its record: compiled on use");
        let echo_def = tools.iter().find(|t| t.spec.name == "marker_echo").unwrap();
        let validator = echo_def.input_validator.get().expect("the schema compiled at the first load compiles");
        assert!(validator.is_valid(&serde_json::json!({"text": "hi"})));
        assert!(!validator.is_valid(&serde_json::json!({"text": 3})));
        assert!(echo_def.input_validator.is_compiled());
        let answer = warm.entries()[0].backend.invoke("marker_echo", &echo, Arc::new(quiver_catalog::NullSink));
        assert!(answer.contains("hi there") && !answer.contains("plugin_unavailable"), "{answer}");

        // The manifest re-signed with other content (same library, same version): the record
        // does not match, the report is checked in full, refused and deleted.
        let text = fs::read_to_string(quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml"))
            .unwrap()
            .replacen("display_name: Marker (test)", "display_name: Marker (changed)", 1);
        let changed = write_bundle(&plugins, "marker-plugin", &lib, Some(&text), Some(&key));
        let changed_sha256 = quiver_manifest::sha256_hex(&fs::read(&changed.manifest).unwrap());
        assert_ne!(changed_sha256, manifest_sha256);
        let changed_record = crate::bundle::manifest_check_digest(&changed_sha256);
        assert!(!recorded().contains(&changed_record));
        let (_, refused) = start();
        assert!(refused.added.is_empty(), "{refused:?}");
        assert_eq!(refused.rejected.len(), 1, "{refused:?}");
        assert_eq!(refused.rejected[0].stage, Stage::Embedded, "{refused:?}");
        assert!(refused.rejected[0].message.contains("display_name"), "{}", refused.rejected[0].message);
        assert!(!report_file(&cache, &sha256).exists(), "a report that does not agree is deleted");
        assert!(recorded().contains(&changed_record), "each manifest has its own record");

        // A forged record for the changed manifest: the scan lists it, but the first call checks
        // the report in full before the call reaches the library, and refuses it.
        fs::write(report_file(&cache, &sha256), &report).unwrap();
        crate::record::log(&checked_log(&cache)).add(&checked_digest(&report, &changed_sha256)).unwrap();
        let (forged, listed) = start();
        assert_eq!(listed.added.len(), 1, "{listed:?}");
        let answer = forged.entries()[0].backend.invoke("marker_echo", &echo, Arc::new(quiver_catalog::NullSink));
        assert!(answer.contains("plugin_unavailable") && answer.contains("display_name"), "{answer}");
        assert!(!report_file(&cache, &sha256).exists(), "the refused report is deleted");
    }

    /// A bundle that ships its load report (`quiver sign --report`) is listed on a first start,
    /// with no report kept, from its signed manifest and that report, without its library being
    /// read (library bytes swapped after the scan are refused at the first call, at the checksum
    /// stage); its schemas are compiled at the scan, but for those known to compile. A shipped
    /// report that is not the library's own: listed, refused at the first call by name, removed
    /// at the next scan, and refused at the scan of a host that loads it at once. A report
    /// changed after signing, or missing, refuses the bundle at the scan, naming the file.
    #[test]
    fn a_shipped_load_report_lists_a_plugin_on_a_first_start_without_reading_its_library() {
        let dir = tempfile::tempdir().unwrap();
        let key = TestKey::generate();
        let lib = plugin_library("marker-plugin", &[]);
        let start = |plugins: &Path, cache: Option<&Path>| {
            let mut src = source(plugins, &key);
            src.settings.isolation.start_cache = cache.map(Path::to_owned);
            let scan = src.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
            (src, scan)
        };
        // The library's own report, as a first load keeps it.
        let probe = dir.path().join("probe");
        write_bundle(&probe, "marker-plugin", &lib, None, Some(&key));
        let (loaded, scan) = start(&probe, Some(&dir.path().join("probe-cache")));
        assert_eq!(scan.added.len(), 1, "{scan:?}");
        let sha256 = loaded.entries()[0].provenance.sha256.clone();
        let report = fs::read_to_string(report_file(&dir.path().join("probe-cache"), &sha256)).unwrap();
        let echo = marker_echo_request();
        let call = |src: &BundleSource| {
            src.entries()[0].backend.invoke("marker_echo", &echo, Arc::new(quiver_catalog::NullSink))
        };

        let plugins = dir.path().join("plugins");
        let bundle = write_bundle_shipping(&plugins, "marker-plugin", &lib, None, Some(&report), Some(&key));
        let (first, scan) = start(&plugins, Some(&dir.path().join("cache-1")));
        assert_eq!(scan.added.len(), 1, "{scan:?}");
        assert!(compiled_as_due(&first), "compiled at the scan unless known to compile");
        assert!(!report_file(&dir.path().join("cache-1"), &sha256).exists(), "listed without a kept report");
        let answer = call(&first);
        assert!(answer.contains("hi there") && !answer.contains("plugin_unavailable"), "{answer}");

        // Listed again on a first start, then the library's bytes are swapped: the first call
        // reads them, and refuses them.
        let (second, scan) = start(&plugins, Some(&dir.path().join("cache-2")));
        assert_eq!(scan.added.len(), 1, "{scan:?}");
        fs::write(&bundle.library, b"not the signed library").unwrap();
        let answer = call(&second);
        assert!(answer.contains("plugin_unavailable") && answer.contains("checksum"), "{answer}");
        fs::copy(&lib, &bundle.library).unwrap();

        // A shipped report that is not the library's own (it still agrees with the manifest).
        let other = report.replacen("\"description\":\"", "\"description\":\"Changed. ", 1);
        assert_ne!(other, report, "the report has a description to change");
        write_bundle_shipping(&plugins, "marker-plugin", &lib, None, Some(&other), Some(&key));
        let (lying, scan) = start(&plugins, Some(&dir.path().join("cache-3")));
        assert_eq!(scan.added.len(), 1, "{scan:?}");
        let answer = call(&lying);
        assert!(answer.contains("plugin_unavailable") && answer.contains("artifact.report"), "{answer}");
        let rescan = lying.refresh(&mut NameClaims::new(&Catalog::empty(), ConflictPolicy::Error));
        assert_eq!(rescan.removed, vec!["marker-plugin".to_owned()], "{rescan:?}");
        assert_eq!(rescan.rejected.len(), 1, "{rescan:?}");
        assert_eq!(rescan.rejected[0].stage, Stage::Embedded, "{rescan:?}");
        assert!(rescan.rejected[0].message.contains("quiver sign --report"), "{}", rescan.rejected[0].message);
        // A host that loads the library at once (no kept reports) refuses it at the scan.
        let (_, scan) = start(&plugins, None);
        assert!(scan.added.is_empty(), "{scan:?}");
        assert_eq!(scan.rejected[0].stage, Stage::Embedded, "{scan:?}");
        assert!(scan.rejected[0].message.contains("artifact.report"), "{}", scan.rejected[0].message);

        // The report changed after signing, then missing: refused at the scan, by file.
        let shipped = write_bundle_shipping(&plugins, "marker-plugin", &lib, None, Some(&report), Some(&key));
        let report_path = shipped.manifest.with_file_name("marker-plugin.report.json");
        fs::write(&report_path, &other).unwrap();
        let (_, scan) = start(&plugins, Some(&dir.path().join("cache-4")));
        assert!(scan.added.is_empty(), "{scan:?}");
        let e = &scan.rejected[0];
        assert_eq!(e.stage, Stage::Checksum, "{scan:?}");
        assert!(
            e.message.contains("marker-plugin.report.json") && e.message.contains("quiver sign --report"),
            "{}",
            e.message
        );
        fs::remove_file(&report_path).unwrap();
        let (_, scan) = start(&plugins, Some(&dir.path().join("cache-5")));
        let e = &scan.rejected[0];
        assert_eq!(e.stage, Stage::Library, "{scan:?}");
        assert!(e.message.contains("marker-plugin.report.json") && e.message.contains("is missing"), "{}", e.message);
    }
}

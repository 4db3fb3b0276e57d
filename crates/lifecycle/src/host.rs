//! The plugin host: scans the plugins folder, keeps the last good state of every bundle, and
//! publishes catalog snapshots.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use quiver_catalog::{Catalog, ConflictPolicy, PluginEntry};

use crate::bundle::{BundleError, Stage, VerifyPolicy, load_verified, signature_path, verify_bundle};

/// Everything the host needs to scan and load.
#[derive(Debug, Clone)]
pub struct HostSettings {
    /// The folder scanned for bundles (`*.tool.yaml` in it and in its direct subfolders).
    pub plugins_dir: PathBuf,
    /// Signature and size policy.
    pub verify: VerifyPolicy,
    /// Where verified libraries are copied before loading; `None`: a private temporary folder
    /// owned by this host.
    pub cache_dir: Option<PathBuf>,
    /// Two plugins claiming one name.
    pub conflicts: ConflictPolicy,
}

/// What a rescan changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScanReport {
    /// Plugins loaded for the first time: (id, version).
    pub added: Vec<(String, String)>,
    /// Plugins hot-swapped: (id, old version, new version).
    pub replaced: Vec<(String, String, String)>,
    /// Plugins whose bundle disappeared.
    pub removed: Vec<String>,
    /// Bundles rejected by this scan (each reported once per change of its files).
    pub rejected: Vec<BundleError>,
    /// Bundles whose files did not change since the last scan.
    pub unchanged: usize,
}

impl ScanReport {
    /// True when the catalog changed.
    pub fn changed(&self) -> bool {
        !(self.added.is_empty() && self.replaced.is_empty() && self.removed.is_empty())
    }
}

/// Identity of a file as `stat` sees it: cheap change detection without re-hashing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
    dev: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let m = fs::symlink_metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
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

#[derive(Debug)]
struct BundleState {
    fingerprint: Fingerprint,
    /// Library file name from the last parse, to stat it on the next scan.
    library_file: Option<String>,
    /// The plugin id this bundle currently provides (last good state), if any.
    loaded_id: Option<String>,
}

#[derive(Default)]
struct ScanState {
    bundles: BTreeMap<PathBuf, BundleState>,
    plugins: BTreeMap<String, Arc<PluginEntry>>,
}

type Listener = Box<dyn Fn(&ScanReport, &Arc<Catalog>) + Send + Sync>;

/// The plugin host. Cheap to share (`Arc<Host>`); [`Host::catalog`] is lock-free.
pub struct Host {
    settings: HostSettings,
    cache_dir: PathBuf,
    _private_cache: Option<tempfile::TempDir>,
    catalog: ArcSwap<Catalog>,
    state: Mutex<ScanState>,
    listeners: Mutex<Vec<Listener>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("plugins_dir", &self.settings.plugins_dir).finish_non_exhaustive()
    }
}

impl Host {
    /// A host with an empty catalog; call [`Host::rescan`] to load the plugins folder.
    pub fn new(settings: HostSettings) -> std::io::Result<Host> {
        let (cache_dir, private) = match &settings.cache_dir {
            Some(d) => (d.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("quiver-libs-").tempdir()?;
                (t.path().to_owned(), Some(t))
            }
        };
        Ok(Host {
            settings,
            cache_dir,
            _private_cache: private,
            catalog: ArcSwap::from_pointee(Catalog::empty()),
            state: Mutex::new(ScanState::default()),
            listeners: Mutex::new(Vec::new()),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    /// The current catalog snapshot.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Registers a function called after every rescan that changed the catalog.
    pub fn on_change(&self, f: impl Fn(&ScanReport, &Arc<Catalog>) + Send + Sync + 'static) {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(f));
    }

    /// Bundle manifests in the plugins folder, sorted: `*.tool.yaml` in it and in each direct
    /// subfolder (hidden entries skipped).
    pub fn find_manifests(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let is_manifest = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".tool.yaml") && n.len() > ".tool.yaml".len())
        };
        for e in fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let ft = e.file_type()?;
            let p = e.path();
            if ft.is_file() && is_manifest(&p) {
                out.push(p);
            } else if ft.is_dir() {
                let Ok(rd) = fs::read_dir(&p) else { continue };
                for e2 in rd.flatten() {
                    let p2 = e2.path();
                    if e2.file_type().is_ok_and(|t| t.is_file())
                        && is_manifest(&p2)
                        && !e2.file_name().to_string_lossy().starts_with('.')
                    {
                        out.push(p2);
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn fingerprint(manifest: &Path, library_file: Option<&str>) -> Fingerprint {
        Fingerprint {
            manifest: stamp(manifest),
            signature: stamp(&signature_path(manifest)),
            library: library_file.and_then(|f| stamp(&manifest.parent().unwrap_or(Path::new(".")).join(f))),
        }
    }

    /// Scans the plugins folder once: loads added bundles, hot-swaps replaced ones, drops removed
    /// ones. A bundle that fails any check keeps its last good version (if it had one) and is
    /// reported once until its files change again. Unchanged bundles cost a few `stat` calls.
    pub fn rescan(&self) -> ScanReport {
        let mut report = ScanReport::default();
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        let found = match Self::find_manifests(&self.settings.plugins_dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(dir = %self.settings.plugins_dir.display(), error = %e, "cannot read the plugins folder; keeping the current catalog");
                return report;
            }
        };

        // Removals first, so a bundle renamed within one scan is not seen as a duplicate.
        let gone: Vec<PathBuf> = state.bundles.keys().filter(|p| !found.contains(p)).cloned().collect();
        for p in gone {
            if let Some(b) = state.bundles.remove(&p)
                && let Some(id) = b.loaded_id
            {
                state.plugins.remove(&id);
                tracing::info!(plugin = %id, bundle = %p.display(), "bundle removed; its tools are gone");
                report.removed.push(id);
            }
        }

        for path in found {
            let prev_lib = state.bundles.get(&path).and_then(|b| b.library_file.clone());
            let fp = Self::fingerprint(&path, prev_lib.as_deref());
            if let Some(b) = state.bundles.get(&path)
                && b.fingerprint == fp
            {
                report.unchanged += 1;
                continue;
            }
            let previous_id = state.bundles.get(&path).and_then(|b| b.loaded_id.clone());
            let outcome = self.try_load(&path, state, previous_id.as_deref());
            let entry = state.bundles.entry(path.clone()).or_insert(BundleState {
                fingerprint: fp.clone(),
                library_file: None,
                loaded_id: None,
            });
            match outcome {
                Ok(plugin) => {
                    let id = plugin.id().to_owned();
                    let lib_file = plugin.manifest.artifact.as_ref().map(|a| a.file.clone());
                    entry.library_file = lib_file.clone();
                    entry.fingerprint = Self::fingerprint(&path, lib_file.as_deref());
                    entry.loaded_id = Some(id.clone());
                    let new_version = plugin.manifest.version.to_string();
                    // Security (issue 10): raise the persistent rollback record.
                    if let Some(store) = &self.settings.verify.rollback
                        && let Err(e) = store.record(&id, &plugin.manifest.version, &plugin.provenance.sha256)
                    {
                        tracing::error!(plugin = %id, error = %e, "cannot update the rollback record");
                    }
                    if let Some(prev) = previous_id.filter(|p| *p != id) {
                        state.plugins.remove(&prev);
                        report.removed.push(prev);
                    }
                    match state.plugins.insert(id.clone(), plugin) {
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
                    entry.library_file = lib_file.or(entry.library_file.take());
                    entry.fingerprint = Self::fingerprint(&path, entry.library_file.as_deref());
                    tracing::warn!(bundle = %path.display(), stage = err.stage.as_str(), error = %err.message, "bundle rejected; keeping the last good state");
                    report.rejected.push(err);
                }
            }
        }

        if report.changed() {
            match Catalog::build(state.plugins.values().cloned().collect(), self.settings.conflicts) {
                Ok(c) => {
                    for w in c.warnings() {
                        tracing::warn!(warning = %w, "catalog");
                    }
                    let c = Arc::new(c);
                    self.catalog.store(c.clone());
                    drop(guard);
                    for l in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                        l(&report, &c);
                    }
                }
                Err(e) => {
                    // Cannot happen: each plugin was test-built into the catalog in `try_load`.
                    tracing::error!(error = %e, "catalog rebuild failed; keeping the previous catalog");
                }
            }
        }
        report
    }

    /// Verifies and loads one bundle, then checks the catalog would accept it.
    fn try_load(
        &self,
        path: &Path,
        state: &ScanState,
        previous_id: Option<&str>,
    ) -> Result<Arc<PluginEntry>, (BundleError, Option<String>)> {
        let verified = verify_bundle(path, &self.settings.verify).map_err(|e| (e, None))?;
        let lib_file = verified.manifest.artifact.as_ref().map(|a| a.file.clone());
        let fail =
            |stage: Stage, message: String| (BundleError { bundle: path.to_owned(), stage, message }, lib_file.clone());
        let id = verified.manifest.id.clone();
        // The same id from another bundle file is a duplicate, not a replacement.
        if previous_id != Some(id.as_str())
            && let Some(other) =
                state.bundles.iter().find(|(p, b)| p.as_path() != path && b.loaded_id.as_deref() == Some(id.as_str()))
        {
            return Err(fail(
                Stage::Catalog,
                format!("plugin id `{id}` is already loaded from {}; remove one of the two bundles", other.0.display()),
            ));
        }
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
                // Same bytes (e.g. a touched file): keep the loaded instance.
                return Ok(loaded.clone());
            }
        }
        let plugin = load_verified(verified, &self.cache_dir).map_err(|e| (e, lib_file.clone()))?;
        // Would the catalog accept it?
        let mut trial: Vec<Arc<PluginEntry>> = state
            .plugins
            .iter()
            .filter(|(k, _)| k.as_str() != id && Some(k.as_str()) != previous_id)
            .map(|(_, v)| v.clone())
            .collect();
        trial.push(plugin.clone());
        Catalog::build(trial, self.settings.conflicts).map_err(|e| fail(Stage::Catalog, e.to_string()))?;
        Ok(plugin)
    }

    /// Rescans every `interval` on a background thread until the returned handle is dropped
    /// (or the host is dropped).
    pub fn spawn_rescanner(self: &Arc<Self>, interval: Duration) -> Rescanner {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<Host> = Arc::downgrade(self);
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-rescan".into())
            .spawn(move || {
                let tick = Duration::from_millis(50).min(interval);
                let mut waited = Duration::ZERO;
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    if waited < interval {
                        continue;
                    }
                    waited = Duration::ZERO;
                    let Some(host) = weak.upgrade() else { break };
                    host.rescan();
                }
            })
            .ok();
        Rescanner { stop, thread }
    }
}

/// Stops the background rescans when dropped.
#[derive(Debug)]
pub struct Rescanner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Rescanner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl quiver_catalog::CatalogSource for Host {
    fn catalog(&self) -> Arc<Catalog> {
        Host::catalog(self)
    }
}

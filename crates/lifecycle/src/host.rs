//! The plugin host: the registry that merges tool sources (the plugins folder first) into one
//! catalog snapshot per change, and publishes it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use quiver_catalog::{Catalog, ConflictPolicy, PluginEntry};

use crate::bundle::{BundleError, VerifyPolicy};
use crate::isolation::IsolationPolicy;
use crate::source::{BundleSource, NameClaims, ToolSource};

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
    /// Which bundles run in-process and which in worker processes.
    pub isolation: IsolationPolicy,
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
    /// Bundles rejected by this scan (each reported once per change of its files), and upstream
    /// sources that cannot serve (down, or a name another plugin serves).
    pub rejected: Vec<BundleError>,
    /// Problems that reject nothing: what they name is left out and the rest serves (an
    /// upstream's tools that cannot be served, while its other tools are). Each is reported
    /// once until it changes.
    pub warnings: Vec<BundleError>,
    /// Bundles whose files did not change since the last scan.
    pub unchanged: usize,
}

impl ScanReport {
    /// True when the catalog changed.
    pub fn changed(&self) -> bool {
        !(self.added.is_empty() && self.replaced.is_empty() && self.removed.is_empty())
    }
}

type Listener = Box<dyn Fn(&ScanReport, &Arc<Catalog>) + Send + Sync>;
type ScanListener = Box<dyn Fn(&ScanReport) + Send + Sync>;

/// Asks the host's rescanner ([`Host::spawn_rescanner`]) to refresh every source soon: within
/// one tick (50 ms), whatever the rescan interval.
#[derive(Debug, Clone, Default)]
pub struct RescanSignal(Arc<AtomicBool>);

impl RescanSignal {
    /// Requests a rescan.
    pub fn request(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

/// The plugin host: a registry that merges the entries of every [`ToolSource`] (the plugins
/// folder first) and builds one catalog per change. Cheap to share (`Arc<Host>`);
/// [`Host::catalog`] is lock-free.
pub struct Host {
    settings: HostSettings,
    catalog: ArcSwap<Catalog>,
    sources: Vec<Box<dyn ToolSource>>,
    signal: RescanSignal,
    /// Serializes refreshes (sources are refreshed one round at a time).
    refreshing: Mutex<()>,
    listeners: Mutex<Vec<Listener>>,
    /// Told of every rescan, changed or not (rejections are news too).
    scan_listeners: Mutex<Vec<ScanListener>>,
    /// What every catalog's search index is built with (`search:` of quiver.yaml).
    search: quiver_catalog::search::SearchSetup,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").field("plugins_dir", &self.settings.plugins_dir).finish_non_exhaustive()
    }
}

/// Prefix of the private folders of library copies (used only where sealed memory files are
/// unavailable): `quiver-libs-PID-…` in the system's temporary folder.
const PRIVATE_PREFIX: &str = "quiver-libs-";

/// Removes private copy folders left in `tmp` by hosts that are no longer running.
fn clean_stale_private_dirs(tmp: &Path) {
    let Ok(rd) = fs::read_dir(tmp) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PRIVATE_PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let alive = pid > 0
            && (unsafe { libc::kill(pid, 0) } == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM));
        if !alive && e.file_type().is_ok_and(|t| t.is_dir()) {
            match fs::remove_dir_all(e.path()) {
                Ok(()) => {
                    tracing::info!(folder = %e.path().display(), "removed library copies left by a host that is gone")
                }
                Err(err) => {
                    tracing::warn!(folder = %e.path().display(), error = %err, "cannot remove stale library copies")
                }
            }
        }
    }
}

/// Where library copies are written when a library cannot be staged in a sealed memory file:
/// the configured `cache_dir`, or a private folder in the system's temporary folder made on
/// first use and removed when the last user is gone.
pub(crate) enum StagingDir {
    /// The configured folder.
    Fixed(PathBuf),
    /// A private folder, made on first use.
    Private(std::sync::OnceLock<Result<tempfile::TempDir, String>>),
}

impl StagingDir {
    /// The folder, made now if it is a private one not made yet.
    pub(crate) fn path(&self) -> std::io::Result<PathBuf> {
        match self {
            StagingDir::Fixed(p) => Ok(p.clone()),
            StagingDir::Private(cell) => {
                let made = cell.get_or_init(|| {
                    let tmp = std::env::temp_dir();
                    tempfile::Builder::new()
                        .prefix(&format!("{PRIVATE_PREFIX}{}-", std::process::id()))
                        .tempdir_in(&tmp)
                        .map_err(|e| format!("cannot make a private folder in {}: {e}", tmp.display()))
                });
                made.as_ref().map(|t| t.path().to_owned()).map_err(|e| std::io::Error::other(e.clone()))
            }
        }
    }
}

/// Large transient buffers (a verified library is read whole, often several MB) must go back to
/// the system when freed. glibc raises its mmap threshold to the size of the largest freed
/// block, after which such buffers come from the heap and stay resident: over many hot swaps
/// the host would keep megabytes it no longer uses. A fixed threshold keeps them in mmap.
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt only changes allocator tuning; M_MMAP_THRESHOLD takes a byte count.
        ONCE.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        });
    }
}

impl Host {
    /// A host with an empty catalog over the plugins folder; call [`Host::rescan`] to load it.
    /// Cleans private library folders left by dead hosts.
    pub fn new(settings: HostSettings) -> std::io::Result<Host> {
        return_large_buffers_to_the_system();
        // The private folder for library copies is made only if a library cannot be staged in
        // a sealed memory file (never on Linux with memfds).
        let staging = Arc::new(match &settings.cache_dir {
            Some(d) => StagingDir::Fixed(d.clone()),
            None => {
                clean_stale_private_dirs(&std::env::temp_dir());
                StagingDir::Private(std::sync::OnceLock::new())
            }
        });
        let source = BundleSource::with_staging(settings.clone(), staging);
        let signal = RescanSignal::default();
        // A worker plugin listed before its worker was up asks for the scan that removes it
        // if that worker fails.
        source.attach(signal.clone());
        Ok(Host {
            settings,
            catalog: ArcSwap::from_pointee(Catalog::empty()),
            sources: vec![Box::new(source)],
            signal,
            refreshing: Mutex::new(()),
            listeners: Mutex::new(Vec::new()),
            scan_listeners: Mutex::new(Vec::new()),
            search: Default::default(),
        })
    }

    /// Adds a tool source after the plugins folder; its entries join the catalog at the next
    /// [`Host::rescan`]. Names already served keep their plugin.
    pub fn add_source(&mut self, source: Box<dyn ToolSource>) {
        source.attach(self.signal.clone());
        self.sources.push(source);
    }

    /// Search settings (an embedding model) for the catalogs built from the next
    /// [`Host::rescan`] on; default: lexical ranking only.
    pub fn set_search(&mut self, search: quiver_catalog::search::SearchSetup) {
        self.search = search;
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

    /// Registers a function called after every rescan, whether or not the catalog changed
    /// (operations: rejected bundles are counted here).
    pub fn on_scan(&self, f: impl Fn(&ScanReport) + Send + Sync + 'static) {
        self.scan_listeners.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(f));
    }

    /// Bundle manifests in the plugins folder, sorted: `*.tool.yaml` in it and in each direct
    /// subfolder (hidden entries skipped).
    pub fn find_manifests(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        BundleSource::find_manifests(dir)
    }

    /// Refreshes every source once and, when anything changed, builds the catalog once from all
    /// their entries. A bundle that fails any check keeps its last good version (if it had one)
    /// and is reported once until its files change again.
    pub fn rescan(&self) -> ScanReport {
        let report = self.refresh_and_build();
        for l in self.scan_listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            l(&report);
        }
        report
    }

    fn refresh_and_build(&self) -> ScanReport {
        let _round = self.refreshing.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.catalog.load_full();
        let mut claims = NameClaims::new(&current, self.settings.conflicts);
        let mut report = ScanReport::default();
        for source in &self.sources {
            let r = source.refresh(&mut claims);
            report.added.extend(r.added);
            report.replaced.extend(r.replaced);
            report.removed.extend(r.removed);
            report.rejected.extend(r.rejected);
            report.warnings.extend(r.warnings);
            report.unchanged += r.unchanged;
        }
        drop(claims);
        if !report.changed() {
            return report;
        }
        let entries: Vec<Arc<PluginEntry>> = self.sources.iter().flat_map(|s| s.entries()).collect();
        match Catalog::build_with(entries, self.settings.conflicts, &self.search) {
            Ok(c) => {
                for w in c.warnings() {
                    // The `quiver` commands print these themselves.
                    tracing::warn!(target: "quiver_lifecycle::reported", warning = %w, "catalog");
                }
                let c = Arc::new(c);
                self.catalog.store(c.clone());
                drop(_round);
                for l in self.listeners.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    l(&report, &c);
                }
            }
            Err(e) => {
                // Sources refuse name clashes before loading, so this means two sources
                // disagree in one round; the previous catalog stays.
                tracing::error!(error = %e, "catalog rebuild failed; keeping the previous catalog");
            }
        }
        report
    }

    /// Rescans every `interval` (never, for `Duration::ZERO`) and whenever a source asks
    /// ([`RescanSignal`]), on a background thread until the returned handle is dropped (or the
    /// host is dropped).
    pub fn spawn_rescanner(self: &Arc<Self>, interval: Duration) -> Rescanner {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<Host> = Arc::downgrade(self);
        let stop2 = stop.clone();
        let signal = self.signal.clone();
        let thread = std::thread::Builder::new()
            .name("quiver-rescan".into())
            .spawn(move || {
                let tick = if interval.is_zero() {
                    Duration::from_millis(50)
                } else {
                    Duration::from_millis(50).min(interval)
                };
                let mut waited = Duration::ZERO;
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    waited += tick;
                    let asked = signal.take();
                    if !asked && (interval.is_zero() || waited < interval) {
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

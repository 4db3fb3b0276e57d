//! An in-process plugin listed before its library is loaded: the backend of a bundle verified
//! at start with its library left unread because an earlier start kept the library's load
//! report (see `BundleSource::list_in_process`). The first call reads the library, checks its
//! sha256 against the signed one, stages exactly those bytes in a sealed memory file and
//! `dlopen`s them; the library's own load report must equal the kept one byte for byte before
//! any call reaches it, and is checked against the signed manifest in full (the scan may have
//! listed it on a recorded check of the kept report, see `source.rs`, `usable_report`). A load
//! that fails answers every call `plugin_unavailable` with the reason and reports the failure
//! once (the plugin is then removed at the next scan).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use quiver_abi::{ToolError, ToolResponse};
use quiver_catalog::{CallSink, Dispatch, ToolBackend};

use crate::bundle::{BundleError, DeferredBundle, Stage, VerifiedBundle, open_verified};
use crate::host::StagingDir;
use crate::host_services::InProcessBackend;
use crate::worker::PLUGIN_UNAVAILABLE;

/// Called once with the failure of a deferred load.
pub(crate) type OnFailure = Box<dyn FnOnce(BundleError) + Send>;

/// What the first call needs to load the library.
struct Pending {
    bundle: DeferredBundle,
    staging: Arc<StagingDir>,
    /// The kept load report (the library's `PluginInfo` JSON from an earlier load).
    report: String,
    /// Whether the scan listed it on the recorded check of `report` (then not checked against
    /// the signed manifest yet: done at the load, before any call reaches the library).
    recorded: bool,
    /// Where it is kept (deleted when the load fails).
    report_file: PathBuf,
    on_failure: OnFailure,
}

/// The backend of an in-process plugin listed from its verified manifest and a kept load
/// report; the library is loaded on the first call.
pub(crate) struct DeferredInProcess {
    plugin: String,
    dispatch: Vec<Dispatch>,
    pending: Mutex<Option<Pending>>,
    loaded: OnceLock<Result<InProcessBackend, String>>,
}

impl DeferredInProcess {
    pub(crate) fn new(
        bundle: DeferredBundle,
        staging: Arc<StagingDir>,
        report: String,
        recorded: bool,
        report_file: PathBuf,
        on_failure: OnFailure,
    ) -> DeferredInProcess {
        DeferredInProcess {
            plugin: bundle.manifest.id.clone(),
            dispatch: crate::bundle::in_process_dispatch(&bundle.manifest),
            pending: Mutex::new(Some(Pending { bundle, staging, report, recorded, report_file, on_failure })),
            loaded: OnceLock::new(),
        }
    }

    /// The loaded library, loading it on first use (concurrent first calls wait for that one
    /// load); the reason when it could not be loaded.
    fn backend(&self) -> Result<&InProcessBackend, &str> {
        self.loaded.get_or_init(|| self.load()).as_ref().map_err(String::as_str)
    }

    fn load(&self) -> Result<InProcessBackend, String> {
        let Some(p) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Err("its library load was interrupted".to_owned());
        };
        let Pending { bundle, staging, report, recorded, report_file, on_failure } = p;
        let path = bundle.manifest_path.clone();
        let outcome = bundle.read().and_then(|verified| {
            let VerifiedBundle { manifest_path, manifest, library, sha256, report: shipped, manifest_sha256, .. } =
                verified;
            let (backend, info) = open_verified(&manifest_path, &manifest, library, &sha256, &staging)?;
            // `report` is the shipped one when the bundle ships one (see `usable_report`).
            if info != report {
                let message = crate::bundle::report_mismatch(shipped.is_some());
                return Err(BundleError { bundle: manifest_path, stage: Stage::Embedded, message });
            }
            // Listed on the recorded check of this report (the scan did not check it): checked
            // against the signed manifest in full here, before the call reaches the library.
            if recorded {
                crate::library::parse_info(&info)
                    .and_then(|parsed| crate::library::check_embedded(&manifest, &manifest_sha256, &parsed))
                    .map_err(|(stage, message)| BundleError { bundle: manifest_path.clone(), stage, message })?;
            }
            Ok(backend)
        });
        match outcome {
            Ok(backend) => {
                tracing::info!(plugin = %self.plugin, "plugin library loaded on first use");
                Ok(backend)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&report_file);
                tracing::error!(bundle = %path.display(), plugin = %self.plugin, stage = e.stage.as_str(), error = %e.message, "the library of a listed plugin failed to load; its tools are removed");
                let why = format!("its library could not be loaded ({} check failed: {})", e.stage.as_str(), e.message);
                on_failure(e);
                Err(why)
            }
        }
    }
}

impl ToolBackend for DeferredInProcess {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        match self.backend() {
            Ok(b) => b.invoke(tool, request, sink),
            Err(why) => {
                let e = ToolError::new(
                    PLUGIN_UNAVAILABLE,
                    format!(
                        "plugin `{}` is unavailable: {why}. Use another tool, or tell the operator (`quiver list` shows its state).",
                        self.plugin
                    ),
                )
                .with_details(serde_json::json!({ "plugin": self.plugin }));
                serde_json::to_string(&ToolResponse::error(e)).unwrap_or_default()
            }
        }
    }

    /// A loaded library's own borrowed path (the load happens here on the first call); a
    /// library that failed to load answers through [`ToolBackend::invoke`], with the reason.
    fn invoke_borrowed(&self, tool: &str, request: &str, sink: &dyn CallSink, answer: &mut dyn FnMut(&str)) -> bool {
        self.backend().is_ok_and(|b| b.invoke_borrowed(tool, request, sink, answer))
    }

    fn dispatch(&self, index: usize) -> Dispatch {
        self.dispatch.get(index).copied().unwrap_or(Dispatch::Thread)
    }
}

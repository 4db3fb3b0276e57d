//! Verifying a bundle (no plugin code runs) and loading a verified one.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quiver_catalog::{Dispatch, PluginEntry, Provenance};
use quiver_manifest::{Execution, Manifest, TrustedKeys, sha256_hex};

use crate::host_services::InProcessBackend;

/// Largest manifest or signature file read.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

/// The check a bundle failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Reading the manifest or signature file.
    Read,
    /// The minisign signature over the manifest.
    Signature,
    /// Manifest schema and semantic validation.
    Manifest,
    /// The library file: location, type, size.
    Library,
    /// The library's sha256 against the manifest.
    Checksum,
    /// A lower version than the one loaded.
    Downgrade,
    /// Opening the library and checking its ABI.
    Abi,
    /// The library's embedded manifest against the signed one, or its tool set.
    Embedded,
    /// The catalog refused the plugin (name conflict, duplicate id).
    Catalog,
    /// Starting the plugin's worker process (isolation `process`).
    Worker,
}

impl Stage {
    /// Kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Signature => "signature",
            Stage::Manifest => "manifest",
            Stage::Library => "library",
            Stage::Checksum => "checksum",
            Stage::Downgrade => "downgrade",
            Stage::Abi => "abi",
            Stage::Embedded => "embedded-manifest",
            Stage::Catalog => "catalog",
            Stage::Worker => "worker",
        }
    }
    /// True for the checks that run before any plugin code is loaded.
    pub fn before_load(self) -> bool {
        !matches!(self, Stage::Abi | Stage::Embedded | Stage::Catalog | Stage::Worker)
    }
}

/// Why a bundle was rejected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BundleError {
    /// The bundle's manifest file.
    pub bundle: PathBuf,
    /// The failed check.
    pub stage: Stage,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for BundleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} check failed: {}", self.bundle.display(), self.stage.as_str(), self.message)
    }
}

impl std::error::Error for BundleError {}

/// What verification needs to know.
#[derive(Debug, Clone)]
pub struct VerifyPolicy {
    /// Keys whose signatures are trusted.
    pub trusted: TrustedKeys,
    /// Development switch: accept bundles without a signature file (a present but bad
    /// signature is still rejected).
    pub allow_unsigned: bool,
    /// Largest library accepted.
    pub max_library_bytes: u64,
}

/// A bundle whose signature, manifest and checksum have been checked. Holds the exact library
/// bytes that were hashed: those bytes, and only those, are what gets loaded.
#[derive(Debug)]
pub struct VerifiedBundle {
    /// The manifest file.
    pub manifest_path: PathBuf,
    /// The signed, validated manifest (with `artifact`).
    pub manifest: Manifest,
    /// The library file named by the manifest.
    pub library_path: PathBuf,
    /// The library bytes that matched the checksum.
    pub library: Vec<u8>,
    /// Their sha256.
    pub sha256: String,
    /// Key id of the signer; `None` when loaded unsigned under the development switch.
    pub signer_key_id: Option<String>,
}

fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let f = fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(std::io::Error::other(format!("file is larger than the {cap}-byte limit")));
    }
    Ok(buf)
}

/// The signature file of a manifest: `NAME.tool.yaml.minisig`.
pub fn signature_path(manifest_path: &Path) -> PathBuf {
    let mut s = manifest_path.as_os_str().to_owned();
    s.push(".minisig");
    PathBuf::from(s)
}

/// Checks a bundle without loading any of its code: signature over the manifest bytes, manifest
/// validation, library location/type/size, and the library's sha256.
pub fn verify_bundle(manifest_path: &Path, policy: &VerifyPolicy) -> Result<VerifiedBundle, BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    let origin = manifest_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();

    let manifest_bytes = read_capped(manifest_path, MAX_MANIFEST_BYTES)
        .map_err(|e| fail(Stage::Read, format!("cannot read the manifest: {e}")))?;
    let sig_path = signature_path(manifest_path);
    let signer_key_id = match fs::symlink_metadata(&sig_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !policy.allow_unsigned {
                return Err(fail(
                    Stage::Signature,
                    format!(
                        "no signature file {}; sign the manifest with `quiver sign {}` (or `minisign -S`) using a key listed in trusted_keys",
                        sig_path.display(),
                        manifest_path.display()
                    ),
                ));
            }
            tracing::warn!(bundle = %manifest_path.display(), "loading an UNSIGNED bundle: allow_unsigned is on (development only)");
            None
        }
        Err(e) => return Err(fail(Stage::Read, format!("cannot read {}: {e}", sig_path.display()))),
        Ok(_) => {
            let sig = read_capped(&sig_path, MAX_MANIFEST_BYTES)
                .map_err(|e| fail(Stage::Read, format!("cannot read {}: {e}", sig_path.display())))?;
            let sig = String::from_utf8(sig).map_err(|_| {
                fail(Stage::Signature, format!("{} is not a text minisign signature", sig_path.display()))
            })?;
            let verified = quiver_manifest::verify(&policy.trusted, &manifest_bytes, &sig)
                .map_err(|e| fail(Stage::Signature, e.to_string()))?;
            Some(verified.key_id)
        }
    };

    let text = std::str::from_utf8(&manifest_bytes)
        .map_err(|_| fail(Stage::Manifest, format!("{origin} is not UTF-8 text")))?;
    let manifest = Manifest::from_yaml(text, &origin).map_err(|e| fail(Stage::Manifest, e.to_string()))?;
    let Some(artifact) = manifest.artifact.clone() else {
        return Err(fail(
            Stage::Manifest,
            format!(
                "{origin}: artifact: a bundle manifest must name its library (artifact.file and artifact.sha256); build the bundle with `cargo xtask build-plugins` or `quiver sign --library`"
            ),
        ));
    };

    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let library_path = dir.join(&artifact.file);
    let meta = fs::symlink_metadata(&library_path)
        .map_err(|e| fail(Stage::Library, format!("library {} is missing: {e}", library_path.display())))?;
    if !meta.file_type().is_file() {
        return Err(fail(
            Stage::Library,
            format!(
                "library {} must be a regular file inside the bundle folder, not a symlink or directory",
                library_path.display()
            ),
        ));
    }
    if meta.len() > policy.max_library_bytes {
        return Err(fail(
            Stage::Library,
            format!(
                "library {} is {} bytes, over the {}-byte limit (max_library_bytes in quiver.yaml)",
                library_path.display(),
                meta.len(),
                policy.max_library_bytes
            ),
        ));
    }
    let library = read_capped(&library_path, policy.max_library_bytes)
        .map_err(|e| fail(Stage::Library, format!("cannot read {}: {e}", library_path.display())))?;
    let sha256 = sha256_hex(&library);
    if sha256 != artifact.sha256 {
        return Err(fail(
            Stage::Checksum,
            format!(
                "library {} has sha256 {sha256} but the signed manifest says {}; the library was changed after signing: rebuild and re-sign the bundle",
                library_path.display(),
                artifact.sha256
            ),
        ));
    }
    Ok(VerifiedBundle {
        manifest_path: manifest_path.to_owned(),
        manifest,
        library_path,
        library,
        sha256,
        signer_key_id,
    })
}

/// Loads a verified bundle into this process: stages its exact bytes (a sealed memory file, or a
/// private copy in `cache_dir`), opens them, checks the ABI, and checks that the library's
/// embedded manifest agrees with the signed one.
pub fn load_verified(bundle: VerifiedBundle, cache_dir: &Path) -> Result<Arc<PluginEntry>, BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: bundle.manifest_path.clone(), stage, message };
    let name = format!("{}-{}-{}", bundle.manifest.id, bundle.manifest.version, &bundle.sha256[..16]);
    let staged = crate::library::stage_library(&bundle.library, &name, Some(cache_dir)).map_err(|e| {
        fail(
            Stage::Library,
            format!("cannot stage the library for loading (private folder {}): {e}", cache_dir.display()),
        )
    })?;
    let opened = crate::library::open_plugin(staged.path()).map_err(|(s, m)| fail(s, m))?;
    let info = crate::library::parse_info(&opened.info_text)
        .and_then(|info| crate::library::check_embedded(&bundle.manifest, &info).map(|()| info))
        .map_err(|(s, m)| fail(s, m))?;
    let provenance = Provenance {
        sha256: bundle.sha256.clone(),
        signer_key_id: bundle.signer_key_id.clone(),
        manifest_path: bundle.manifest_path.display().to_string(),
    };
    let dispatch = bundle
        .manifest
        .tools
        .iter()
        .map(|t| match t.policies.effective(t.side_effects).execution {
            Execution::Inline => Dispatch::Inline,
            Execution::Thread => Dispatch::Thread,
        })
        .collect();
    let backend = Arc::new(InProcessBackend::new(opened.module, dispatch));
    PluginEntry::new(bundle.manifest, &info, provenance, backend).map(Arc::new).map_err(|e| BundleError {
        bundle: bundle.manifest_path.clone(),
        stage: Stage::Embedded,
        message: e.message,
    })
}

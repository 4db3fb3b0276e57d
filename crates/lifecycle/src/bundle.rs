//! Verifying a bundle (no plugin code runs) and loading a verified one.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quiver_catalog::{Dispatch, PluginEntry, Provenance};
use quiver_manifest::{Execution, Manifest, Revocations, TrustedKeys, sha256_hex};

use crate::host::StagingDir;
use crate::host_services::InProcessBackend;
use crate::library::VerifiedLibrary;
use crate::rollback::RollbackStore;

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
    /// A lower version than the one loaded, or than the highest ever accepted (rollback record).
    Downgrade,
    /// A revoked signing key or sha256.
    Revoked,
    /// A bundle file or folder others may write to (refused under `strict`).
    Permissions,
    /// Opening the library and checking its ABI.
    Abi,
    /// The library's embedded manifest against the signed one, or its tool set.
    Embedded,
    /// The catalog refused the plugin (name conflict, duplicate id).
    Catalog,
    /// Starting the plugin's worker process (isolation `process`).
    Worker,
    /// Reaching an upstream MCP server or reading its tools (`sources` in the configuration).
    Upstream,
    /// A secret a tool declares is not supplied by the host configuration (`secrets:`).
    Secrets,
    /// The host configuration's `plugin_config` entry does not fit the plugin's
    /// `config_schema`.
    Config,
    /// Resolving an adapter bundle on this host (its program, environment, header secrets).
    Adapter,
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
            Stage::Revoked => "revoked",
            Stage::Permissions => "permissions",
            Stage::Abi => "abi",
            Stage::Embedded => "embedded-manifest",
            Stage::Catalog => "catalog",
            Stage::Worker => "worker",
            Stage::Upstream => "upstream",
            Stage::Secrets => "secrets",
            Stage::Config => "config",
            Stage::Adapter => "adapter",
        }
    }
    /// True for the checks whose outcome depends on the host as well as on the bundle's files:
    /// the other plugins (a name or id another one holds), the secrets supplied (read again at
    /// each rescan), the programs and variables an adapter needs. A bundle refused at one of
    /// these is checked again at every rescan, so it loads once the cause is gone, with no
    /// change to its files; its refusal is still reported once.
    pub fn depends_on_the_host(self) -> bool {
        matches!(self, Stage::Catalog | Stage::Secrets | Stage::Adapter)
    }
    /// True for the checks that run before any plugin code is loaded.
    pub fn before_load(self) -> bool {
        !matches!(self, Stage::Abi | Stage::Embedded | Stage::Catalog | Stage::Worker | Stage::Upstream)
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
    /// Production hardening: group/world-writable bundle files or folders, and a same-version
    /// re-sign with other bytes, are refused instead of warned about.
    pub strict: bool,
    /// Revoked keys and sha256s.
    pub revoked: Revocations,
    /// The persistent rollback record; `None`: only the in-memory downgrade check.
    pub rollback: Option<Arc<RollbackStore>>,
    /// The secrets the host configuration names, per plugin id and secret name (`secrets:`):
    /// `Ok` when its value was resolved, `Err(why)` when its variable or file could not be
    /// read. A bundle whose tools declare a secret that is missing here or `Err` is refused
    /// before loading. Shared by every copy of the policy: `quiver serve` updates it after
    /// reading the secrets again ([`SecretStatus::set`]), so a bundle refused for a secret
    /// loads at the next rescan once the secret can be read.
    pub secrets: SecretStatus,
    /// The host configuration's `plugin_config`, per plugin id: a bundle whose manifest has a
    /// `config_schema` its entry does not fit is refused before loading, naming each field.
    /// `None`: every call brings its own configuration and nothing is checked at load (the
    /// contract tests, whose fixture cases each carry theirs and are checked there).
    pub plugin_config: Option<BTreeMap<String, serde_json::Value>>,
    /// The record log ([`crate::record::RecordLog`]) where this host records the signed
    /// manifests that passed their checks (one line per manifest sha256, see
    /// [`manifest_check_digest`]), so a later scan of the same manifest skips its JSON Schema
    /// check; `None`: every manifest is checked in full (`quiver serve` sets it to its state
    /// folder's `checked.log`).
    pub checked_manifests: Option<PathBuf>,
}

/// Whether each configured secret could be read, per plugin id and secret name (see
/// [`VerifyPolicy::secrets`]); clones share one status.
#[derive(Debug, Clone, Default)]
pub struct SecretStatus(Arc<std::sync::RwLock<SecretStatusMap>>);

/// Per plugin id and secret name: `Ok` when its value was read, else why not (never the value).
pub type SecretStatusMap = BTreeMap<String, BTreeMap<String, Result<(), String>>>;

impl SecretStatus {
    /// A status holding `status`.
    pub fn new(status: SecretStatusMap) -> SecretStatus {
        SecretStatus(Arc::new(std::sync::RwLock::new(status)))
    }

    /// Replaces the status (the secrets were read again); every copy of the policy sees it.
    pub fn set(&self, status: SecretStatusMap) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// The status of plugin `id`'s secrets, when the configuration names any.
    pub fn of(&self, id: &str) -> Option<BTreeMap<String, Result<(), String>>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }
}

impl FromIterator<(String, BTreeMap<String, Result<(), String>>)> for SecretStatus {
    fn from_iter<I: IntoIterator<Item = (String, BTreeMap<String, Result<(), String>>)>>(iter: I) -> SecretStatus {
        SecretStatus::new(iter.into_iter().collect())
    }
}

impl Default for VerifyPolicy {
    /// No trusted keys, signed bundles only, 64 MiB libraries, strict, no revocations, no
    /// persistent rollback record.
    fn default() -> VerifyPolicy {
        VerifyPolicy {
            trusted: TrustedKeys::default(),
            allow_unsigned: false,
            max_library_bytes: 64 << 20,
            strict: true,
            revoked: Revocations::default(),
            rollback: None,
            secrets: SecretStatus::default(),
            plugin_config: Some(BTreeMap::new()),
            checked_manifests: None,
        }
    }
}

/// What a signed manifest that passed its checks is recorded as (see [`crate::record`]): its
/// file's sha256, checked by this host build.
pub(crate) fn manifest_check_digest(manifest_sha256: &str) -> String {
    crate::record::digest("quiver manifest check", &[manifest_sha256.as_bytes()])
}

/// Reads a manifest, skipping its schema check when `policy` records that exactly these bytes
/// passed before, and records a manifest that passed now (best effort).
fn read_manifest(
    text: &str,
    origin: &str,
    manifest_sha256: &str,
    policy: &VerifyPolicy,
) -> Result<Manifest, quiver_manifest::ManifestError> {
    let Some(file) = &policy.checked_manifests else {
        return Manifest::from_yaml(text, origin);
    };
    let log = crate::record::log(file);
    let digest = manifest_check_digest(manifest_sha256);
    let checked_before = log.contains(&digest);
    let manifest = Manifest::from_yaml_with(text, origin, checked_before)?;
    if !checked_before {
        let _ = log.add(&digest);
    }
    Ok(manifest)
}

/// A bundle whose signature, manifest and checksum have been checked. Holds the exact library
/// bytes that were hashed: those bytes, and only those, are what gets loaded.
#[derive(Debug)]
pub struct VerifiedBundle {
    /// The manifest file.
    pub manifest_path: PathBuf,
    /// The signed, validated manifest (with `artifact`).
    pub manifest: Manifest,
    /// The library file named by the manifest (an adapter bundle: the manifest itself).
    pub library_path: PathBuf,
    /// The library bytes that matched the checksum (an adapter bundle, which has no library:
    /// the signed manifest bytes, whose sha256 is `sha256`).
    pub library: VerifiedLibrary,
    /// Their sha256.
    pub sha256: String,
    /// Key id of the signer; `None` when loaded unsigned under the development switch.
    pub signer_key_id: Option<String>,
    /// The sha256 of the signed manifest file's bytes.
    pub manifest_sha256: String,
    /// The load report the bundle ships (`artifact.report`), read and checked against its signed
    /// sha256; the library's own report must equal it (checked at the load).
    pub report: Option<String>,
}

/// The largest load report a bundle may ship.
pub const MAX_REPORT_BYTES: u64 = 8 * 1024 * 1024;

/// What kind of file system object a non-regular file is, for messages.
fn kind_of(ft: fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else {
        "not a regular file"
    }
}

/// Opens `path` only if it is a regular file, and reads at most `cap` bytes of it.
///
/// The path is `lstat`ed first, so a FIFO, socket or device is refused without being opened
/// (opening some devices has effects); then it is opened with `O_NOFOLLOW | O_NONBLOCK` (a FIFO
/// swapped in after the `lstat` cannot block the open, a symlink cannot be followed) and the
/// *opened handle* is `fstat`ed: what is read is what was checked. The size is checked on the
/// handle before reading, and the read stops at `cap + 1` bytes in case the file grows.
/// `NotFound` is passed through so callers can tell a missing file from a bad one.
pub(crate) fn read_capped(path: &Path, cap: u64) -> std::io::Result<(Vec<u8>, fs::Metadata)> {
    let (f, meta) = open_capped(path, cap)?;
    let mut buf = Vec::with_capacity(meta.len() as usize);
    f.take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(std::io::Error::other(format!("the file is larger than the {cap}-byte limit")));
    }
    Ok((buf, meta))
}

/// Opens `path` as [`read_capped`] does (a regular file, checked on the opened handle, at most
/// `cap` bytes by its size) without reading it.
fn open_capped(path: &Path, cap: u64) -> std::io::Result<(fs::File, fs::Metadata)> {
    let not_regular = |ft: fs::FileType| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is {}; only regular files are read from a bundle", path.display(), kind_of(ft)),
        )
    };
    let pre = fs::symlink_metadata(path)?;
    if !pre.file_type().is_file() {
        return Err(not_regular(pre.file_type()));
    }
    let flags = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let f = fs::OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path).map_err(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} became a symbolic link while being checked; only regular files are read", path.display()),
            )
        } else {
            e
        }
    })?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if meta.len() > cap {
        return Err(std::io::Error::other(format!("the file is {} bytes, over the {cap}-byte limit", meta.len())));
    }
    Ok((f, meta))
}

/// Group- or world-writable: anyone but the owner could swap the bytes between two scans.
/// A folder with the sticky bit (like `/tmp`) lets others add entries but not replace ours.
fn writable_by_others(meta: &fs::Metadata) -> bool {
    let mode = meta.mode();
    let open = mode & 0o022 != 0;
    if meta.file_type().is_dir() { open && mode & 0o1000 == 0 } else { open }
}

/// Warns about (or, under `strict`, refuses) a bundle file or folder others may write to.
fn check_permissions(what: &Path, meta: &fs::Metadata, strict: bool) -> Result<(), String> {
    if !writable_by_others(meta) {
        return Ok(());
    }
    let message = format!(
        "{} is writable by {} (mode {:o}), so another user could replace it; run `chmod go-w {}`",
        what.display(),
        if meta.mode() & 0o002 != 0 { "every user" } else { "its group" },
        meta.mode() & 0o7777,
        what.display()
    );
    if strict {
        Err(format!("{message} (refused because `strict` is on)"))
    } else {
        tracing::warn!(path = %what.display(), mode = format!("{:o}", meta.mode() & 0o7777), "{message}");
        Ok(())
    }
}

/// The signature file of a manifest: `NAME.tool.yaml.minisig`.
pub fn signature_path(manifest_path: &Path) -> PathBuf {
    let mut s = manifest_path.as_os_str().to_owned();
    s.push(".minisig");
    PathBuf::from(s)
}

/// Checks a bundle without loading any of its code: the files are regular and not writable by
/// others, the signature over the manifest bytes is by a trusted, unrevoked key allowed to sign
/// this plugin id and its trusted comment names this id, version and library; the manifest is
/// valid; the library is a regular file of bounded size whose sha256 matches and is not revoked;
/// the version is not below the rollback record.
pub fn verify_bundle(manifest_path: &Path, policy: &VerifyPolicy) -> Result<VerifiedBundle, BundleError> {
    match verify_bundle_with(manifest_path, policy, &|_, _| false)? {
        Checked::Full(b) => Ok(b),
        Checked::Deferred(d) => Err(BundleError {
            bundle: d.manifest_path,
            stage: Stage::Library,
            message: "the library was not read".into(),
        }),
    }
}

/// A bundle verified with its library left unread (see [`verify_bundle_with`]): everything of
/// [`verify_bundle`] passed except reading and hashing the library, which [`DeferredBundle::read`]
/// does before anything of it is loaded.
#[derive(Debug)]
pub(crate) struct DeferredBundle {
    pub manifest_path: PathBuf,
    pub manifest: Manifest,
    pub library_path: PathBuf,
    /// The sha256 the signed manifest names (revocation and rollback were checked against it).
    pub sha256: String,
    pub signer_key_id: Option<String>,
    /// The sha256 of the signed manifest file's bytes.
    pub manifest_sha256: String,
    /// `max_library_bytes` of the policy it was verified under.
    pub max_library_bytes: u64,
    /// `strict` of that policy.
    pub strict: bool,
    /// The shipped load report, as in [`VerifiedBundle::report`].
    pub report: Option<String>,
}

impl DeferredBundle {
    /// Reads the library now, exactly as [`verify_bundle`] would have: a regular file of bounded
    /// size, not writable by others, hashed while streamed into its sealed memory file, and
    /// refused at the [`Stage::Checksum`] stage unless its sha256 is the signed one.
    pub fn read(self) -> Result<VerifiedBundle, BundleError> {
        let library = self.library_reader()()?;
        Ok(VerifiedBundle {
            manifest_path: self.manifest_path,
            manifest: self.manifest,
            library_path: self.library_path,
            library,
            sha256: self.sha256,
            signer_key_id: self.signer_key_id,
            manifest_sha256: self.manifest_sha256,
            report: self.report,
        })
    }
}

impl DeferredBundle {
    /// What [`DeferredBundle::read`] does to the library, to run later on another thread: gives
    /// the library's bytes in their sealed memory file only if their sha256 is the signed one.
    pub fn library_reader(&self) -> impl FnOnce() -> Result<VerifiedLibrary, BundleError> + Send + 'static {
        let (manifest_path, library_path, sha256) =
            (self.manifest_path.clone(), self.library_path.clone(), self.sha256.clone());
        let (cap, strict, staged_name) =
            (self.max_library_bytes, self.strict, staged_name(&self.manifest, &self.sha256));
        move || read_library(&manifest_path, &library_path, &sha256, cap, strict, &staged_name)
    }
}

/// What [`verify_bundle_with`] gives back.
#[derive(Debug)]
pub(crate) enum Checked {
    /// Verified with its library bytes read and hashed.
    Full(VerifiedBundle),
    /// Verified except for the library bytes, which were left unread as asked.
    Deferred(DeferredBundle),
}

fn staged_name(manifest: &Manifest, sha256: &str) -> String {
    format!("{}-{}-{}", manifest.id, manifest.version, sha256.get(..16).unwrap_or(""))
}

/// Reads the library at `library_path` into its sealed memory file while hashing it, and checks
/// it: a regular file inside the bundle folder, at most `cap` bytes, not writable by others
/// (refused under `strict`), and its sha256 is `expected`.
fn read_library(
    manifest_path: &Path,
    library_path: &Path,
    expected: &str,
    cap: u64,
    strict: bool,
    staged_name: &str,
) -> Result<VerifiedLibrary, BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    // Hashed while it is read into the sealed memory file it will be loaded from: the bytes
    // loaded are exactly the bytes hashed, with no copy of the library on the heap.
    let read = open_capped(library_path, cap).and_then(|(f, meta)| {
        let len = meta.len();
        crate::library::read_hashed(f, len, cap, staged_name).map(|(lib, hash)| (lib, hash, meta))
    });
    let (library, sha256, library_meta) = read.map_err(|e| library_error(manifest_path, library_path, e))?;
    check_permissions(library_path, &library_meta, strict).map_err(|e| fail(Stage::Permissions, e))?;
    if sha256 != expected {
        return Err(fail(
            Stage::Checksum,
            format!(
                "library {} has sha256 {sha256} but the signed manifest says {expected}; the library was changed after signing: rebuild and re-sign the bundle",
                library_path.display(),
            ),
        ));
    }
    Ok(library)
}

fn library_error(manifest_path: &Path, library_path: &Path, e: std::io::Error) -> BundleError {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    match e.kind() {
        std::io::ErrorKind::NotFound => fail(Stage::Library, format!("library {} is missing", library_path.display())),
        std::io::ErrorKind::InvalidInput => fail(
            Stage::Library,
            format!("{e}: the library must be a regular file inside the bundle folder, not a link, pipe or device"),
        ),
        _ => fail(
            Stage::Library,
            format!("cannot read library {}: {e} (max_library_bytes in quiver.yaml)", library_path.display()),
        ),
    }
}

/// [`verify_bundle`], except that the library bytes are left unread when `defer` says so for
/// the signed manifest and signer (key id): the library file is then only checked as a file
/// (regular, bounded size, permissions), and revocation and rollback are checked against the
/// sha256 the signed manifest names. Its bytes must go through [`DeferredBundle::read`] before
/// any of them is loaded.
pub(crate) fn verify_bundle_with(
    manifest_path: &Path,
    policy: &VerifyPolicy,
    defer: &dyn Fn(&Manifest, Option<&str>) -> bool,
) -> Result<Checked, BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    let origin = manifest_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();

    let (manifest_bytes, manifest_meta) = read_capped(manifest_path, MAX_MANIFEST_BYTES)
        .map_err(|e| fail(Stage::Read, format!("cannot read the manifest: {e}")))?;
    check_permissions(manifest_path, &manifest_meta, policy.strict).map_err(|e| fail(Stage::Permissions, e))?;
    let dir = manifest_path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    // The bundle folder and the one holding it (the plugins folder, for a bundle in a subfolder).
    for folder in [Some(dir), dir.parent().filter(|d| !d.as_os_str().is_empty())].into_iter().flatten() {
        if let Ok(meta) = fs::metadata(folder) {
            check_permissions(folder, &meta, policy.strict).map_err(|e| fail(Stage::Permissions, e))?;
        }
    }
    let sig_path = signature_path(manifest_path);
    let signature = match read_capped(&sig_path, MAX_MANIFEST_BYTES) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !policy.allow_unsigned {
                return Err(fail(
                    Stage::Signature,
                    format!(
                        "no signature file {}; sign the manifest with `quiver sign {} --key SECRET_KEY` (a plugin library's bundle also with `--library LIB --report`), the key's .pub listed in trusted_keys",
                        sig_path.display(),
                        manifest_path.display()
                    ),
                ));
            }
            tracing::warn!(bundle = %manifest_path.display(), "loading an UNSIGNED bundle: allow_unsigned is on (development only)");
            None
        }
        Err(e) => return Err(fail(Stage::Read, format!("cannot read {}: {e}", sig_path.display()))),
        Ok((sig, sig_meta)) => {
            check_permissions(&sig_path, &sig_meta, policy.strict).map_err(|e| fail(Stage::Permissions, e))?;
            let sig = String::from_utf8(sig).map_err(|_| {
                fail(Stage::Signature, format!("{} is not a text minisign signature", sig_path.display()))
            })?;
            let verified = quiver_manifest::verify(&policy.trusted, &manifest_bytes, &sig)
                .map_err(|e| fail(Stage::Signature, e.to_string()))?;
            if policy.revoked.key_revoked(&verified.key_id) {
                return Err(fail(
                    Stage::Revoked,
                    format!(
                        "signed by key {} ({}), which is revoked (revoked.keys in quiver.yaml); get the bundle re-signed with a current key",
                        verified.key_id, verified.key_name
                    ),
                ));
            }
            Some(verified)
        }
    };

    let manifest_sha256 = sha256_hex(&manifest_bytes);
    if policy.revoked.sha256_revoked(&manifest_sha256) {
        return Err(fail(
            Stage::Revoked,
            format!("this manifest (sha256 {manifest_sha256}) is revoked (revoked.sha256 in quiver.yaml)"),
        ));
    }
    let text = std::str::from_utf8(&manifest_bytes)
        .map_err(|_| fail(Stage::Manifest, format!("{origin} is not UTF-8 text")))?;
    let manifest =
        read_manifest(text, &origin, &manifest_sha256, policy).map_err(|e| fail(Stage::Manifest, e.to_string()))?;
    let supplied = policy.secrets.of(&manifest.id);
    for tool in &manifest.tools {
        for name in &tool.secrets {
            let (id, tool) = (&manifest.id, &tool.name);
            let problem = match supplied.as_ref().and_then(|s| s.get(name)) {
                Some(Ok(())) => continue,
                Some(Err(why)) => {
                    format!(
                        "plugin `{id}`: tool `{tool}` needs the secret `{name}`, configured as secrets.{id}.{name}, but {why}"
                    )
                }
                None => format!(
                    "plugin `{id}`: tool `{tool}` needs the secret `{name}`, which the host configuration does not supply; add it to quiver.yaml as `secrets: {{ {id}: {{ {name}: {{ env: VARIABLE }} }} }}` (or `{{ file: PATH }}`), then set that variable or create that file"
                ),
            };
            return Err(fail(Stage::Secrets, problem));
        }
    }
    let config_issues = match &policy.plugin_config {
        Some(configs) => manifest.config_issues(configs.get(&manifest.id)),
        None => Vec::new(),
    };
    if !config_issues.is_empty() {
        let problems: Vec<String> = config_issues.iter().map(ToString::to_string).collect();
        return Err(fail(
            Stage::Config,
            format!(
                "the host configuration does not fit plugin `{}`'s config_schema: {}",
                manifest.id,
                problems.join("; ")
            ),
        ));
    }
    if manifest.adapter.is_some() {
        // An adapter bundle has no library: the signed manifest is the whole of what runs, so
        // the trusted comment binds the manifest's own sha256 (see `quiver_manifest::sign_bundle`).
        check_signer(&signature, &manifest, &manifest_sha256).map_err(|e| fail(Stage::Signature, e))?;
        if let Some(store) = &policy.rollback {
            store
                .check(&manifest.id, &manifest.version, &manifest_sha256, policy.strict)
                .map_err(|e| fail(Stage::Downgrade, e))?;
        }
        return Ok(Checked::Full(VerifiedBundle {
            manifest_path: manifest_path.to_owned(),
            manifest,
            library_path: manifest_path.to_owned(),
            library: VerifiedLibrary::from_bytes(manifest_bytes),
            sha256: manifest_sha256.clone(),
            signer_key_id: signature.map(|v| v.key_id),
            manifest_sha256,
            report: None,
        }));
    }
    let Some(artifact) = manifest.artifact.clone() else {
        return Err(fail(
            Stage::Manifest,
            format!(
                "{origin}: artifact: a bundle manifest must name its library (artifact.file and artifact.sha256); build the bundle with `cargo xtask build-plugins` or `quiver sign --library`"
            ),
        ));
    };
    check_signer(&signature, &manifest, &artifact.sha256).map_err(|e| fail(Stage::Signature, e))?;

    let library_path = dir.join(&artifact.file);
    let signer_key_id = signature.map(|v| v.key_id);
    let report = read_shipped_report(manifest_path, dir, &artifact, policy.strict)?;
    if defer(&manifest, signer_key_id.as_deref()) {
        let (_, library_meta) = open_capped(&library_path, policy.max_library_bytes)
            .map_err(|e| library_error(manifest_path, &library_path, e))?;
        check_permissions(&library_path, &library_meta, policy.strict).map_err(|e| fail(Stage::Permissions, e))?;
        let sha256 = artifact.sha256;
        check_revoked_and_rollback(manifest_path, &library_path, &manifest, &sha256, policy)?;
        return Ok(Checked::Deferred(DeferredBundle {
            manifest_path: manifest_path.to_owned(),
            manifest,
            library_path,
            sha256,
            signer_key_id,
            manifest_sha256,
            max_library_bytes: policy.max_library_bytes,
            strict: policy.strict,
            report,
        }));
    }
    let library = read_library(
        manifest_path,
        &library_path,
        &artifact.sha256,
        policy.max_library_bytes,
        policy.strict,
        &staged_name(&manifest, &artifact.sha256),
    )?;
    let sha256 = artifact.sha256;
    check_revoked_and_rollback(manifest_path, &library_path, &manifest, &sha256, policy)?;
    Ok(Checked::Full(VerifiedBundle {
        manifest_path: manifest_path.to_owned(),
        manifest,
        library_path,
        library,
        sha256,
        signer_key_id,
        manifest_sha256,
        report,
    }))
}

/// A bundle being signed, for its signer's own load check (`quiver sign --report`): `manifest`
/// as parsed from `manifest_path`, and the library at `library_path` read into its sealed memory
/// file (a regular file of at most `max_bytes`) and hashed. Nothing is verified: there is no
/// signature yet. Never used to serve.
pub(crate) fn unsigned_bundle(
    manifest_path: &Path,
    manifest: Manifest,
    library_path: &Path,
    max_bytes: u64,
) -> Result<VerifiedBundle, BundleError> {
    let read = open_capped(library_path, max_bytes).and_then(|(f, meta)| {
        let name = format!("{}-{}-unsigned", manifest.id, manifest.version);
        crate::library::read_hashed(f, meta.len(), max_bytes, &name)
    });
    let (library, sha256) = read.map_err(|e| library_error(manifest_path, library_path, e))?;
    Ok(VerifiedBundle {
        manifest_path: manifest_path.to_owned(),
        manifest,
        library_path: library_path.to_owned(),
        library,
        sha256,
        signer_key_id: None,
        manifest_sha256: String::new(),
        report: None,
    })
}

/// The library's own load report `actual` must equal the one its bundle ships, if any, byte for
/// byte: a shipped report lists the plugin before its library is loaded, so it may not say
/// anything else than the library does.
pub(crate) fn check_shipped_report(shipped: Option<&str>, actual: &str) -> Result<(), String> {
    match shipped {
        Some(shipped) if shipped != actual => Err(report_mismatch(true)),
        _ => Ok(()),
    }
}

/// Why a plugin listed from a load report is refused when its library's own report differs:
/// the report the bundle ships (`shipped`), or the one an earlier load kept.
pub(crate) fn report_mismatch(shipped: bool) -> String {
    if shipped {
        "the load report shipped in the bundle (artifact.report) differs from the one the library gives when loaded; sign the bundle again with `quiver sign --report` after building the library".to_owned()
    } else {
        "the plugin's self-description differs from the one its earlier load reported for the same library bytes"
            .to_owned()
    }
}

/// Reads the load report a signed manifest names (`artifact.report`), if any: a regular file
/// beside the manifest, at most [`MAX_REPORT_BYTES`], not writable by others (refused under
/// `strict`), UTF-8, and its sha256 the signed one.
fn read_shipped_report(
    manifest_path: &Path,
    dir: &Path,
    artifact: &quiver_manifest::Artifact,
    strict: bool,
) -> Result<Option<String>, BundleError> {
    let Some(shipped) = &artifact.report else { return Ok(None) };
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    let path = dir.join(&shipped.file);
    let (bytes, meta) = read_capped(&path, MAX_REPORT_BYTES).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "is missing".to_owned(),
            _ => format!("cannot be read: {e}"),
        };
        fail(
            Stage::Library,
            format!(
                "the load report {} that the signed manifest names (artifact.report) {why}; ship it with the bundle (`quiver sign --report` writes it), or sign the manifest again without `--report`",
                path.display()
            ),
        )
    })?;
    check_permissions(&path, &meta, strict).map_err(|e| fail(Stage::Permissions, e))?;
    let sha256 = sha256_hex(&bytes);
    if sha256 != shipped.sha256 {
        return Err(fail(
            Stage::Checksum,
            format!(
                "load report {} has sha256 {sha256} but the signed manifest says {} (artifact.report.sha256); the report was changed after signing: sign the bundle again with `quiver sign --report`",
                path.display(),
                shipped.sha256
            ),
        ));
    }
    String::from_utf8(bytes).map(Some).map_err(|_| {
        fail(
            Stage::Library,
            format!(
                "load report {} is not UTF-8 text; sign the bundle again with `quiver sign --report`",
                path.display()
            ),
        )
    })
}

/// The library's sha256 is not revoked and the version is not below the rollback record.
fn check_revoked_and_rollback(
    manifest_path: &Path,
    library_path: &Path,
    manifest: &Manifest,
    sha256: &str,
    policy: &VerifyPolicy,
) -> Result<(), BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    if policy.revoked.sha256_revoked(sha256) {
        return Err(fail(
            Stage::Revoked,
            format!("library {} (sha256 {sha256}) is revoked (revoked.sha256 in quiver.yaml)", library_path.display()),
        ));
    }
    if let Some(store) = &policy.rollback {
        store.check(&manifest.id, &manifest.version, sha256, policy.strict).map_err(|e| fail(Stage::Downgrade, e))?;
    }
    Ok(())
}

/// The signer may sign this plugin id, and the trusted comment names its id, version and
/// `sha256` (the library's, or an adapter manifest's own).
fn check_signer(
    signature: &Option<quiver_manifest::Verified>,
    manifest: &Manifest,
    sha256: &str,
) -> Result<(), String> {
    let Some(v) = signature else { return Ok(()) };
    if !v.plugins.is_empty() && !v.plugins.iter().any(|g| quiver_manifest::glob_matches(g, &manifest.id)) {
        return Err(format!(
            "key {} ({}) may sign only the plugins {} but this bundle is `{}`; sign it with the plugin's own key, or add the id to that key's `plugins` in quiver.yaml",
            v.key_id,
            v.key_name,
            v.plugins.join(", "),
            manifest.id
        ));
    }
    quiver_manifest::check_bundle_comment(&v.trusted_comment, &manifest.id, &manifest.version.to_string(), sha256)
}

/// Loads a verified bundle into this process: stages its exact bytes (a sealed memory file, or a
/// private copy in `cache_dir`), opens them, checks the ABI, and checks that the library's
/// embedded manifest agrees with the signed one.
pub fn load_verified(bundle: VerifiedBundle, cache_dir: &Path) -> Result<Arc<PluginEntry>, BundleError> {
    load_verified_report(bundle, &StagingDir::Fixed(cache_dir.to_owned())).map(|(entry, _)| entry)
}

/// [`load_verified`], also giving back the library's load report (its `PluginInfo` JSON as the
/// library wrote it).
pub(crate) fn load_verified_report(
    bundle: VerifiedBundle,
    staging: &StagingDir,
) -> Result<(Arc<PluginEntry>, String), BundleError> {
    let VerifiedBundle { manifest_path, manifest, library, sha256, signer_key_id, report, manifest_sha256, .. } =
        bundle;
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.clone(), stage, message };
    let (backend, info_text) = open_verified(&manifest_path, &manifest, library, &sha256, staging)?;
    check_shipped_report(report.as_deref(), &info_text).map_err(|m| fail(Stage::Embedded, m))?;
    let info = crate::library::parse_info(&info_text)
        .and_then(|info| crate::library::check_embedded(&manifest, &manifest_sha256, &info).map(|()| info))
        .map_err(|(s, m)| fail(s, m))?;
    let provenance = Provenance { sha256, signer_key_id, manifest_path: manifest_path.display().to_string() };
    let entry = PluginEntry::new(manifest, &info, provenance, Arc::new(backend)).map(Arc::new);
    let entry = entry.map_err(|e| fail(Stage::Embedded, e.message))?;
    Ok((entry, info_text))
}

/// How the router runs each tool of an in-process plugin (manifest order).
pub(crate) fn in_process_dispatch(manifest: &Manifest) -> Vec<Dispatch> {
    manifest
        .tools
        .iter()
        .map(|t| match t.policies.effective(t.side_effects).execution {
            Execution::Inline => Dispatch::Inline,
            Execution::Thread => Dispatch::Thread,
        })
        .collect()
}

/// Stages verified library bytes, opens them (`dlopen`: the plugin's constructors run here) and
/// checks the ABI; gives back the backend and the library's load report (`PluginInfo` JSON).
pub(crate) fn open_verified(
    manifest_path: &Path,
    manifest: &Manifest,
    library: VerifiedLibrary,
    sha256: &str,
    staging: &StagingDir,
) -> Result<(InProcessBackend, String), BundleError> {
    let fail = |stage: Stage, message: String| BundleError { bundle: manifest_path.to_owned(), stage, message };
    let name = staged_name(manifest, sha256);
    // A sealed memory file is loaded as it is; only bytes held otherwise need a private copy.
    let staged = match library.is_sealed() {
        true => library.stage(&name, None),
        false => staging.path().and_then(|dir| library.stage(&name, Some(&dir))),
    };
    let staged = staged.map_err(|e| fail(Stage::Library, format!("cannot stage the library for loading: {e}")))?;
    let opened = crate::library::open_plugin(&staged).map_err(|(s, m)| fail(s, m))?;
    Ok((InProcessBackend::new(opened.module, in_process_dispatch(manifest)), opened.info_text))
}

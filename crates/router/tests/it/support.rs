//! Shared setup for tests (and the benchmark) that need real plugin libraries: the marker test
//! plugin built with its router test tools, made into a signed bundle in a temporary folder and
//! loaded through `quiver_lifecycle::Host`, exactly as the host loads any plugin.
//!
//! The library is built once per process with its own target directory
//! (`target/test-plugins-router`: the outer `cargo test` may hold the lock of `target/`, and the
//! feature build must not overwrite the plain build other tests use).

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use quiver_catalog::ConflictPolicy;
use quiver_lifecycle::{Host, HostSettings, VerifyPolicy};
use quiver_manifest::{KeyPair, TrustedKeys};

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/router is two levels deep").to_path_buf()
}

fn marker_dir() -> PathBuf {
    repo_root().join("tests/plugins/marker-plugin")
}

/// The marker plugin's library with the `router-tools` feature (debug build), built once per
/// process.
pub fn marker_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_marker(false))
}

/// The same library as a release build (for the benchmark).
pub fn marker_library_release() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_marker(true))
}

fn build_marker(release: bool) -> PathBuf {
    let root = repo_root();
    let target = root.join("target/test-plugins-router");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args(["build", "--quiet", "-p", "marker-plugin", "--features", "router-tools"]);
    if release {
        cmd.arg("--release");
    }
    let status =
        cmd.arg("--target-dir").arg(&target).env_remove("QUIVER_MARKER_VERSION").status().expect("cannot run cargo");
    assert!(status.success(), "building marker-plugin (feature router-tools) failed");
    let profile = if release { "release" } else { "debug" };
    let lib =
        target.join(format!("{profile}/{}marker_plugin{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    assert!(lib.is_file(), "{} was not built", lib.display());
    lib
}

/// The manifest the library embeds: `tool.yaml` followed by `router-tools.yaml` (as
/// `router_tools::manifest` composes it).
pub fn marker_manifest() -> String {
    let base = fs::read_to_string(marker_dir().join("tool.yaml")).expect("read tool.yaml");
    let extra = fs::read_to_string(marker_dir().join("router-tools.yaml")).expect("read router-tools.yaml");
    format!("{}\n{}", base.trim_end(), extra)
}

/// A plugins folder in a temporary directory, with a signing key the host trusts.
pub struct Plugins {
    pub dir: tempfile::TempDir,
    pub key: KeyPair,
    pub trusted: TrustedKeys,
}

impl Default for Plugins {
    fn default() -> Self {
        Plugins::new()
    }
}

impl Plugins {
    /// An empty plugins folder and a fresh key.
    pub fn new() -> Plugins {
        let dir = tempfile::Builder::new().prefix("quiver-router-test-").tempdir().expect("tempdir");
        let key = KeyPair::generate();
        let trusted = TrustedKeys::new().with("test", "router tests", key.public_key().clone());
        Plugins { dir, key, trusted }
    }

    /// Writes a signed bundle `NAME/NAME.tool.yaml` for `library`, with `manifest` plus its
    /// `artifact` section.
    pub fn add_bundle(&self, name: &str, manifest: &str, library: &Path) -> PathBuf {
        let folder = self.dir.path().join(name);
        fs::create_dir_all(&folder).expect("bundle folder");
        let bytes = fs::read(library).expect("read library");
        let file = library.file_name().expect("library file name").to_string_lossy().into_owned();
        fs::write(folder.join(&file), &bytes).expect("copy library");
        let text = format!(
            "{}\nartifact:\n  file: {file}\n  sha256: {}\n",
            manifest.trim_end(),
            quiver_manifest::sha256_hex(&bytes)
        );
        let path = folder.join(format!("{name}.tool.yaml"));
        fs::write(&path, &text).expect("write manifest");
        let sig = quiver_manifest::sign_bundle(&self.key, &text, name).expect("bundle manifest signs");
        fs::write(quiver_lifecycle::signature_path(&path), sig).expect("write signature");
        path
    }

    /// A host over this folder, scanned once; panics if any bundle was rejected.
    pub fn host(&self) -> Arc<Host> {
        let host = Host::new(HostSettings {
            plugins_dir: self.dir.path().to_owned(),
            verify: VerifyPolicy {
                trusted: self.trusted.clone(),
                allow_unsigned: false,
                max_library_bytes: 256 * 1024 * 1024,
                ..VerifyPolicy::default()
            },
            cache_dir: None,
            conflicts: ConflictPolicy::Error,
            isolation: Default::default(),
        })
        .expect("host");
        let report = host.rescan();
        assert!(report.rejected.is_empty(), "bundles rejected: {:#?}", report.rejected);
        Arc::new(host)
    }
}

/// The marker plugin (with router test tools) loaded through a real host.
pub fn marker_host() -> (Plugins, Arc<Host>) {
    marker_host_from(marker_library())
}

/// A library of the marker plugin (debug or release) loaded through a real host.
pub fn marker_host_from(library: &Path) -> (Plugins, Arc<Host>) {
    let plugins = Plugins::new();
    plugins.add_bundle("marker", &marker_manifest(), library);
    let host = plugins.host();
    assert!(host.catalog().resolve("marker_echo").is_some(), "marker_echo not loaded");
    (plugins, host)
}

/// A copy of a loaded plugin with another manifest and/or backend, as a re-signed release of
/// the same library would load: the tools' schemas are the loaded ones (manifest overrides
/// still win), tools the new manifest drops are left out, the library's code is the same.
/// Used to simulate a later plugin version whose manifest renamed or deprecated names, and to
/// watch the exact requests the router sends.
pub fn entry_with(
    plugin: &quiver_catalog::PluginEntry,
    manifest: quiver_manifest::Manifest,
    backend: Arc<dyn quiver_catalog::ToolBackend>,
) -> quiver_catalog::PluginEntry {
    manifest.validate("test manifest").unwrap_or_else(|e| panic!("{e}"));
    let tools = plugin
        .tools
        .iter()
        .filter(|d| manifest.tool(&d.spec.name).is_some())
        .map(|d| quiver_abi::ToolSchemas {
            name: d.spec.name.clone(),
            input_schema: (*d.input_schema).clone(),
            output_schema: d.output_schema.as_deref().cloned().unwrap_or_else(|| serde_json::json!({"type": "object"})),
            actions: Vec::new(),
        })
        .collect();
    let info = quiver_abi::PluginInfo {
        abi_version: quiver_abi::ABI_VERSION,
        sdk_version: quiver_abi::SDK_VERSION.to_owned(),
        manifest: manifest.to_yaml(),
        tools,
    };
    quiver_catalog::PluginEntry::new(manifest, &info, plugin.provenance.clone(), backend)
        .unwrap_or_else(|e| panic!("{e}"))
}

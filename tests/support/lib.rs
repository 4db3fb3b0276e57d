//! Support for Quiver's end-to-end tests: builds real plugin libraries with cargo and packs them
//! into signed bundles in temporary folders, exactly as an author would.
//!
//! Plugins are built into `target/test-plugins` (a separate target folder: the `cargo test`
//! that runs the tests may hold the lock on `target/`). Builds run once per process and
//! variant. This crate does not load plugins or run the host; tests do that with the real crates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use quiver_manifest::{KeyPair, sha256_hex};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

/// Builds `package` (a cdylib workspace member) in debug mode, with extra compile-time
/// environment (`env`), and returns a stable copy of its library unique to that variant.
/// Panics with cargo's output when the build fails.
pub fn plugin_library(package: &str, env: &[(&str, &str)]) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let key = format!("{package}{env:?}");
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(k, _)| *k == key) {
        return p.clone();
    }
    let root = workspace_root();
    // A variant with compile-time env gets its own target folder, so builds of different
    // variants (possibly from several test processes) never overwrite each other's output.
    let variant: String = env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let target_dir = if env.is_empty() {
        root.join("target/test-plugins")
    } else {
        root.join("target/test-plugins-variants").join(sanitize(&variant))
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args(["build", "--quiet", "-p", package, "--target-dir"]).arg(&target_dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building plugin {package} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = target_dir.join("debug").join(library_file_name(package));
    assert!(lib.is_file(), "cargo built {package} but {} is missing", lib.display());
    // Copy out, so a later rebuild of the same target folder cannot change what tests use.
    let stable =
        target_dir.join(format!("{}-{}-{}", std::process::id(), sanitize(&variant), library_file_name(package)));
    std::fs::copy(&lib, &stable).expect("copy library");
    built.push((key, stable.clone()));
    stable
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect()
}

/// `lib<crate_name>.so` for a package name.
pub fn library_file_name(package: &str) -> String {
    format!("{}{}{}", std::env::consts::DLL_PREFIX, package.replace('-', "_"), std::env::consts::DLL_SUFFIX)
}

/// A signing key for tests, with its public half.
pub struct TestKey {
    /// The key pair.
    pub pair: KeyPair,
}

impl TestKey {
    /// A fresh key.
    pub fn generate() -> TestKey {
        TestKey { pair: KeyPair::generate() }
    }
    /// The minisign public key file text.
    pub fn public_text(&self) -> String {
        self.pair.public_key_text()
    }
}

/// The files of one bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// `NAME.tool.yaml`.
    pub manifest: PathBuf,
    /// `NAME.tool.yaml.minisig`.
    pub signature: PathBuf,
    /// The library.
    pub library: PathBuf,
}

/// Writes a signed bundle of `package` into `dir`: the library (copied from `library`), the
/// source `tool.yaml` (or `manifest_text`) with an `artifact` section appended, and its minisign
/// signature by `key` (no signature when `key` is `None`).
pub fn write_bundle(
    dir: &Path,
    package: &str,
    library: &Path,
    manifest_text: Option<&str>,
    key: Option<&TestKey>,
) -> Bundle {
    std::fs::create_dir_all(dir).expect("bundle dir");
    let lib_name = library_file_name(package);
    let lib_dest = dir.join(&lib_name);
    let bytes = std::fs::read(library).expect("read library");
    // Write to a temporary name and rename, so a scanning host never sees half a file.
    let tmp = dir.join(format!(".{lib_name}.tmp"));
    std::fs::write(&tmp, &bytes).expect("write library");
    std::fs::rename(&tmp, &lib_dest).expect("rename library");
    let source = match manifest_text {
        Some(t) => t.to_owned(),
        None => std::fs::read_to_string(workspace_root().join(source_dir(package)).join("tool.yaml"))
            .expect("source tool.yaml"),
    };
    let artifact = quiver_manifest::Artifact { file: lib_name.clone(), sha256: sha256_hex(&bytes) };
    let text = quiver_manifest::with_artifact_text(&source, &artifact);
    let manifest = dir.join(format!("{package}.tool.yaml"));
    let signature = dir.join(format!("{package}.tool.yaml.minisig"));
    match key {
        Some(k) => {
            let sig = quiver_manifest::sign_bundle(&k.pair, &text, package).expect("the bundle manifest is valid");
            std::fs::write(&signature, sig).expect("write signature");
        }
        None => {
            let _ = std::fs::remove_file(&signature);
        }
    }
    std::fs::write(&manifest, &text).expect("write manifest");
    Bundle { manifest, signature, library: lib_dest }
}

/// Where a package's sources live (`plugins/NAME` or `tests/plugins/NAME`).
pub fn source_dir(package: &str) -> PathBuf {
    let root = workspace_root();
    let p = Path::new("plugins").join(package);
    if root.join(&p).is_dir() { p } else { Path::new("tests/plugins").join(package) }
}

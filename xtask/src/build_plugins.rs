//! `cargo xtask build-plugins`: release-builds the plugins under `plugins/` one by one (cargo's
//! own progress visible), loads each new library through the real host with the bundles of the
//! configured plugins folder (manifest ↔ library, actions, name clashes: a failure leaves the
//! previous bundle in place), and turns each into a signed bundle beside its sources, signed
//! with the local development key, shipping the library's load report (made as `quiver sign
//! --report` makes it, on a scratch copy under `target/bundle-reports`).
//!
//! Bundle layout (all generated, git-ignored): `plugins/NAME/lib<crate>.so`,
//! `plugins/NAME/NAME.report.json` (the load report), `plugins/NAME/NAME.tool.yaml` (the source
//! `tool.yaml` plus an `artifact` section naming both) and `plugins/NAME/NAME.tool.yaml.minisig`.
//! Files are replaced atomically (temp file + rename), the library and report first and the
//! signature last, and left alone when their contents did not change, so a
//! running host sees either the old bundle, a transient mismatch it re-checks on the next change,
//! or the new bundle, and never reloads an unchanged one.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use quiver_manifest::{KeyPair, Manifest, TrustedKeys};

use crate::workspace::{AdapterSource, PluginSource, Workspace};

/// The local development key: created on first use, trusted by the repository's `quiver.yaml`.
#[derive(Debug)]
pub struct DevKey {
    /// The key pair.
    pub pair: KeyPair,
    /// Path of the public key file.
    pub public_path: PathBuf,
}

impl DevKey {
    /// File stem of the development key in `.quiver-dev/`.
    const NAME: &'static str = "dev";

    /// Loads `.quiver-dev/dev.key`, creating the pair (`dev.key` mode 0600, `dev.pub`) if absent.
    pub fn load_or_create(dir: &Path) -> Result<DevKey> {
        let secret_path = dir.join(format!("{}.key", Self::NAME));
        let public_path = dir.join(format!("{}.pub", Self::NAME));
        if secret_path.exists() {
            let text =
                fs::read_to_string(&secret_path).with_context(|| format!("cannot read {}", secret_path.display()))?;
            let pair = KeyPair::from_secret_key_text(&text).with_context(|| {
                format!(
                    "{} is not an unencrypted minisign secret key; delete .quiver-dev/ to make a new development key",
                    secret_path.display()
                )
            })?;
            let public_text = pair.public_key_text();
            if fs::read_to_string(&public_path).ok().as_deref() != Some(public_text.as_str()) {
                write_atomic(&public_path, public_text.as_bytes(), 0o644)?;
            }
            return Ok(DevKey { pair, public_path });
        }
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let pair = KeyPair::generate();
        write_new(&secret_path, pair.secret_key_text().as_bytes(), 0o600)?;
        write_atomic(&public_path, pair.public_key_text().as_bytes(), 0o644)?;
        eprintln!(
            "created the local development key {} (key id {}); quiver.yaml trusts {}",
            secret_path.display(),
            pair.key_id(),
            public_path.display()
        );
        Ok(DevKey { pair, public_path })
    }

    fn trusted(&self) -> TrustedKeys {
        TrustedKeys::new().with(Self::NAME, self.public_path.display().to_string(), self.pair.public_key().clone())
    }
}

/// The bundle manifest text: the source manifest with an `artifact` section appended (naming
/// the load report the bundle ships, if any).
pub fn bundle_manifest_text(
    source: &str,
    library_file: &str,
    sha256: &str,
    report: Option<quiver_manifest::ReportFile>,
) -> String {
    let artifact = quiver_manifest::Artifact { file: library_file.to_owned(), sha256: sha256.to_owned(), report };
    quiver_manifest::with_artifact_text(source, &artifact)
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        anyhow::anyhow!("cannot write {}: {e}", path.display())
    })
}

/// Creates `path` (never overwrites).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Writes `bytes` unless the file already holds exactly them; true when it wrote.
fn write_if_changed(path: &Path, bytes: &[u8], mode: u32) -> Result<bool> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    write_atomic(path, bytes, mode)?;
    Ok(true)
}

/// What happened to one bundle.
#[derive(Debug)]
pub struct Built {
    /// The bundle manifest.
    pub manifest: PathBuf,
    /// Plugin id and version.
    pub id: String,
    /// Plugin version.
    pub version: String,
    /// sha256 of the library.
    pub sha256: String,
    /// True when any file of the bundle changed.
    pub changed: bool,
}

/// The load report of a built library, as `quiver sign --report` makes it (the library loaded
/// in a sandboxed worker process by the `quiver` binary and checked against the source
/// manifest), for the bundle to ship: signed on a scratch copy under `target/bundle-reports`,
/// so the bundle itself is only written when something in it changed.
pub fn load_report(ws: &Workspace, quiver: &Path, plugin: &PluginSource, library: &Path) -> Result<String> {
    let scratch = ws.target_dir()?.join("bundle-reports").join(&plugin.name);
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let lib = scratch.join(plugin.library_file_name());
    fs::copy(library, &lib).with_context(|| format!("cannot copy {} to {}", library.display(), lib.display()))?;
    let name = format!("{}.tool.yaml", plugin.name);
    fs::copy(plugin.source_manifest(), scratch.join(&name))
        .with_context(|| format!("cannot copy {}", plugin.source_manifest().display()))?;
    let key = scratch.join("scratch.key");
    write_new(&key, KeyPair::generate().secret_key_text().as_bytes(), 0o600)?;
    let out = std::process::Command::new(quiver)
        .args(["sign", &name, "--key", "scratch.key", "--library"])
        .arg(plugin.library_file_name())
        .arg("--report")
        .current_dir(&scratch)
        .output()
        .with_context(|| format!("cannot run {}", quiver.display()))?;
    if !out.status.success() {
        bail!(
            "{}: `quiver sign --report` failed to make the load report: {}",
            plugin.name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let report = scratch.join(plugin.report_file_name());
    fs::read_to_string(&report).with_context(|| format!("cannot read {}", report.display()))
}

/// Makes the bundle of one plugin from a built library, shipping `report` (its load report).
pub fn bundle(plugin: &PluginSource, library: &Path, report: Option<&str>, key: &DevKey) -> Result<Built> {
    let source_path = plugin.source_manifest();
    let source = fs::read_to_string(&source_path).with_context(|| format!("cannot read {}", source_path.display()))?;
    let manifest = Manifest::from_yaml(&source, &source_path.display().to_string())?;
    if manifest.artifact.is_some() {
        bail!(
            "{}: the source manifest must not have an `artifact` section (build-plugins adds it to the bundle); remove it",
            source_path.display()
        );
    }
    let lib_bytes =
        fs::read(library).with_context(|| format!("cannot read the built library {}", library.display()))?;
    let sha256 = quiver_manifest::sha256_hex(&lib_bytes);
    let lib_file = plugin.library_file_name();
    let shipped = report.map(|r| quiver_manifest::ReportFile {
        file: plugin.report_file_name(),
        sha256: quiver_manifest::sha256_hex(r.as_bytes()),
    });
    let text = bundle_manifest_text(&source, &lib_file, &sha256, shipped);
    // Make sure what we sign is what the host will accept.
    Manifest::from_yaml(&text, &plugin.bundle_manifest().display().to_string())?;

    let mut changed = write_if_changed(&plugin.dir.join(&lib_file), &lib_bytes, 0o644)?;
    if let Some(r) = report {
        changed |= write_if_changed(&plugin.dir.join(plugin.report_file_name()), r.as_bytes(), 0o644)?;
    }
    let manifest_path = plugin.bundle_manifest();
    changed |= write_if_changed(&manifest_path, text.as_bytes(), 0o644)?;
    let sig_path = signature_path(&manifest_path);
    let signed = fs::read_to_string(&sig_path)
        .ok()
        .and_then(|sig| quiver_manifest::verify(&key.trusted(), text.as_bytes(), &sig).ok())
        .is_some_and(|v| {
            // A signature in an older comment format is made again (the host refuses it).
            quiver_manifest::check_bundle_comment(
                &v.trusted_comment,
                &manifest.id,
                &manifest.version.to_string(),
                &sha256,
            )
            .is_ok()
        });
    if !signed {
        let comment = quiver_manifest::bundle_comment(&manifest.id, &manifest.version.to_string(), &sha256);
        let sig = quiver_manifest::sign(&key.pair, text.as_bytes(), &comment);
        write_atomic(&sig_path, sig.as_bytes(), 0o644)?;
        changed = true;
    }
    Ok(Built { manifest: manifest_path, id: manifest.id, version: manifest.version.to_string(), sha256, changed })
}

/// Makes the bundle of an adapter: the source manifest copied as `NAME.tool.yaml` (an adapter
/// has no library, so no `artifact`) and signed; the trusted comment binds the manifest's own
/// sha256. No load check here: the host resolves the program when it loads the bundle (and
/// `contract-test` runs it).
pub fn bundle_adapter(adapter: &AdapterSource, key: &DevKey) -> Result<Built> {
    let source_path = adapter.source_manifest();
    let text = fs::read_to_string(&source_path).with_context(|| format!("cannot read {}", source_path.display()))?;
    let manifest = Manifest::from_yaml(&text, &source_path.display().to_string())?;
    let sha256 = quiver_manifest::sha256_hex(text.as_bytes());
    let manifest_path = adapter.bundle_manifest();
    let mut changed = write_if_changed(&manifest_path, text.as_bytes(), 0o644)?;
    let sig_path = signature_path(&manifest_path);
    let signed = fs::read_to_string(&sig_path)
        .ok()
        .and_then(|sig| quiver_manifest::verify(&key.trusted(), text.as_bytes(), &sig).ok())
        .is_some_and(|v| {
            quiver_manifest::check_bundle_comment(
                &v.trusted_comment,
                &manifest.id,
                &manifest.version.to_string(),
                &sha256,
            )
            .is_ok()
        });
    if !signed {
        let sig = quiver_manifest::sign_bundle(&key.pair, &text, &manifest_path.display().to_string())?;
        write_atomic(&sig_path, sig.as_bytes(), 0o644)?;
        changed = true;
    }
    Ok(Built { manifest: manifest_path, id: manifest.id, version: manifest.version.to_string(), sha256, changed })
}

/// Cargo arguments that strip the symbol table and debug info of one package's release
/// library (the bundled plugins ship stripped: 9-19 MB with line tables, a fraction without).
/// Only that package's own link changes: its dependencies keep the workspace's release
/// profile, so nothing else is rebuilt. Dynamic symbols (the plugin's exported root module)
/// stay.
pub fn strip_config(package: &str) -> [String; 2] {
    ["--config".to_owned(), format!("profile.release.package.{package}.strip=\"symbols\"")]
}

/// `NAME.tool.yaml.minisig`.
pub fn signature_path(manifest: &Path) -> PathBuf {
    let mut s = manifest.as_os_str().to_owned();
    s.push(".minisig");
    PathBuf::from(s)
}

/// Builds the `quiver` binary (dev profile) and returns its path.
pub fn build_quiver(ws: &Workspace) -> Result<PathBuf> {
    eprintln!("\n==> building the quiver binary (loads each new library through the real host)");
    ws.run(ws.cargo().args(["build", "-p", "quiver"]))?;
    Ok(ws.target_dir()?.join("debug").join(format!("quiver{}", std::env::consts::EXE_SUFFIX)))
}

/// Loads a freshly built library through the real host, together with the bundles of the
/// configured plugins folder: the manifest's tools and actions must match the library, and no
/// name may clash with another plugin (`quiver contract-test --load-only`).
fn check_library(ws: &Workspace, quiver: &Path, plugin: &PluginSource, library: &Path) -> Result<()> {
    let status = std::process::Command::new(quiver)
        .current_dir(&ws.root)
        .arg("contract-test")
        .arg(&plugin.dir)
        .arg("--library")
        .arg(library)
        .arg("--load-only")
        .status()
        .with_context(|| format!("cannot run {}", quiver.display()))?;
    if !status.success() {
        bail!(
            "{}: the new library failed the load check (see above); fix {} or the code, then run build-plugins again. The previous bundle is left in place.",
            plugin.name,
            plugin.source_manifest().display()
        );
    }
    Ok(())
}

/// `cargo xtask build-plugins [NAME...]`: per plugin, a release build with cargo's own progress,
/// a load check of the new library, then the signed bundle.
pub fn run(ws: &Workspace, names: &[String]) -> Result<()> {
    let (plugins, adapters) = ws.select_all(names)?;
    let adapters: Vec<AdapterSource> = adapters.into_iter().filter(|a| a.shipped).collect();
    if !adapters.is_empty() {
        let key = DevKey::load_or_create(&ws.dev_key_dir())?;
        for a in &adapters {
            let built = bundle_adapter(a, &key)?;
            let rel = built.manifest.strip_prefix(&ws.root).unwrap_or(&built.manifest);
            println!(
                "{:<24} {:<10} {}  {}  (adapter){}",
                built.id,
                built.version,
                &built.sha256[..16],
                rel.display(),
                if built.changed { "" } else { "  (unchanged)" }
            );
        }
    }
    if plugins.is_empty() {
        if !adapters.is_empty() {
            return Ok(());
        }
        println!("no plugins under {}; create one with `cargo xtask new-tool NAME`", ws.plugins_dir().display());
        return Ok(());
    }
    let n = plugins.len();
    for (i, p) in plugins.iter().enumerate() {
        eprintln!("\n==> [{}/{n}] {}: release build", i + 1, p.name);
        ws.run(
            ws.cargo()
                .args(["build", "--release", "-p", &p.package])
                .args(strip_config(&p.package))
                .env_remove("CARGO_TERM_QUIET"),
        )?;
    }
    let quiver = build_quiver(ws)?;
    let release = ws.target_dir()?.join("release");
    let key = DevKey::load_or_create(&ws.dev_key_dir())?;
    let mut n_changed = 0;
    for (i, p) in plugins.iter().enumerate() {
        let library = release.join(p.library_file_name());
        eprintln!("\n==> [{}/{n}] {}: load check and bundle", i + 1, p.name);
        check_library(ws, &quiver, p, &library)?;
        let report = load_report(ws, &quiver, p, &library)?;
        let built = bundle(p, &library, Some(&report), &key)?;
        n_changed += usize::from(built.changed);
        let rel = built.manifest.strip_prefix(&ws.root).unwrap_or(&built.manifest);
        println!(
            "{:<24} {:<10} {}  {}{}",
            built.id,
            built.version,
            &built.sha256[..16],
            rel.display(),
            if built.changed { "" } else { "  (unchanged)" }
        );
    }
    println!(
        "{} bundle(s) ready, {n_changed} changed; signed with {} (key id {})",
        plugins.len(),
        key.public_path.display(),
        key.pair.key_id()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_text_keeps_the_source_and_adds_the_artifact() {
        let source = "# comment\nmanifest_version: 1\nid: x\n\n";
        let text = bundle_manifest_text(source, "libx.so", "ab12", None);
        assert!(text.starts_with("# comment\nmanifest_version: 1\nid: x\n# Added"));
        assert!(text.ends_with("artifact:\n  file: libx.so\n  sha256: ab12\n"));
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_file() {
        let dir = std::env::temp_dir().join(format!("xtask-write-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.txt");
        write_atomic(&p, b"one", 0o644).unwrap();
        assert!(!write_if_changed(&p, b"one", 0o644).unwrap());
        assert!(write_if_changed(&p, b"two", 0o644).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}

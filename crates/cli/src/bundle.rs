//! Making bundles by hand: pinning a library into a manifest (a textual edit that keeps the
//! author's comments) and writing signature files. Used by `quiver sign` and `quiver contract-test`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};
use quiver_manifest::Artifact;

/// Returns `manifest` with a fresh `artifact` section (see `quiver_manifest::pin_artifact`):
/// the author's comments are kept, and the result is parsed back to make sure the edit holds.
pub fn set_artifact(manifest: &str, artifact: &Artifact, origin: &str) -> Result<String> {
    Ok(quiver_manifest::pin_artifact(manifest, artifact, origin)?)
}

/// The folder a bundle manifest sits in (its files sit beside it).
fn bundle_dir(manifest_path: &Path) -> &Path {
    manifest_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Writes `report` (a library's load report) beside `manifest_path` as `NAME.report.json` (for
/// `NAME.tool.yaml`), unless the file already holds exactly it; gives what the manifest's
/// `artifact.report` must say.
pub fn ship_report(manifest_path: &Path, report: &str) -> Result<quiver_manifest::ReportFile> {
    let name = manifest_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".tool.yaml").or_else(|| name.strip_suffix(".yaml")).unwrap_or(&name);
    let file = format!("{stem}.report.json");
    let path = bundle_dir(manifest_path).join(&file);
    if fs::read(&path).ok().as_deref() != Some(report.as_bytes()) {
        write_atomic(&path, report.as_bytes())?;
    }
    Ok(quiver_manifest::ReportFile { file, sha256: quiver_manifest::sha256_hex(report.as_bytes()) })
}

/// The artifact section for a library file beside the manifest: its file name and sha256.
pub fn artifact_for(manifest_path: &Path, library: &Path) -> Result<Artifact> {
    let file = library
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no usable file name", library.display()))?
        .to_owned();
    let beside = bundle_dir(manifest_path).join(&file);
    if !library.is_file() {
        bail!(
            "--library {}: no such file; build the plugin (`cargo build --release -p NAME`) and pass its library (lib*.so), placed beside the manifest",
            library.display()
        );
    }
    let same = fs::canonicalize(&beside).ok().zip(fs::canonicalize(library).ok()).is_some_and(|(a, b)| a == b);
    if !same {
        bail!(
            "the library must sit beside the manifest: copy {} to {} first (a bundle names its library by file name only)",
            library.display(),
            beside.display()
        );
    }
    let bytes = fs::read(library).with_context(|| format!("cannot read {}", library.display()))?;
    Ok(Artifact { file, sha256: quiver_manifest::sha256_hex(&bytes), report: None })
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a host scanning the
/// folder never reads half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = bundle_dir(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o644).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        bail!("cannot write {}: {e}", path.display());
    }
    Ok(())
}

/// Creates `path` with `mode`; refuses to overwrite an existing file.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut f = match fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            bail!("{} already exists; refusing to overwrite it (pick another --name or --out-dir)", path.display())
        }
        Err(e) => bail!("cannot create {}: {e}", path.display()),
    };
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_manifest::ARTIFACT_MARKER;

    const BASE: &str = "# my plugin\nmanifest_version: 1\nid: demo\nversion: 0.1.0\ndisplay_name: Demo\ndescription: A demo plugin for tests.\nabi: 1\ntools:\n  # the one tool\n  - name: demo_echo\n    title: Echo\n    description: Returns its input text unchanged, for tests.\n    side_effects: read\n";

    fn art(sha: char) -> Artifact {
        Artifact { file: "libdemo.so".into(), sha256: sha.to_string().repeat(64), report: None }
    }

    #[test]
    fn appends_and_replaces_keeping_comments() {
        let once = set_artifact(BASE, &art('a'), "t").unwrap();
        assert!(once.starts_with(BASE.trim_end()));
        assert!(once.contains("  # the one tool\n"));
        let twice = set_artifact(&once, &art('b'), "t").unwrap();
        assert_eq!(twice.matches("artifact:").count(), 1);
        assert_eq!(twice.matches(ARTIFACT_MARKER).count(), 1);
        assert!(twice.contains(&"b".repeat(64)) && !twice.contains(&"a".repeat(64)));
        assert_eq!(twice, set_artifact(&twice, &art('b'), "t").unwrap());
    }

    /// A shipped load report is pinned under `artifact.report`, and signing again without one
    /// drops it.
    #[test]
    fn pins_and_drops_a_shipped_report() {
        let report = quiver_manifest::ReportFile { file: "demo.report.json".into(), sha256: "d".repeat(64) };
        let with = set_artifact(BASE, &Artifact { report: Some(report.clone()), ..art('a') }, "t").unwrap();
        let parsed = quiver_manifest::Manifest::from_yaml(&with, "t").unwrap();
        assert_eq!(parsed.artifact.and_then(|a| a.report), Some(report));
        let without = set_artifact(&with, &art('a'), "t").unwrap();
        assert!(!without.contains("report") && !without.contains(&"d".repeat(64)), "{without}");
        assert_eq!(without, set_artifact(BASE, &art('a'), "t").unwrap());
    }

    #[test]
    fn replaces_a_hand_written_block_in_the_middle() {
        let text = BASE.replace("abi: 1\n", "abi: 1\nartifact: {file: old.so, sha256: x}\n# keep me\n");
        let out = set_artifact(&text, &art('c'), "t").unwrap();
        assert!(!out.contains("old.so"));
        assert!(out.contains("# keep me\n"));
        assert!(out.contains("tools:\n"));
    }
}

//! Pinning a library into a manifest's text: the `artifact` section a bundle adds to the source
//! `tool.yaml`. A textual edit, so the author's comments and layout survive byte for byte.

use crate::{Artifact, Manifest, ManifestError};

/// The comment line written above a generated `artifact` section.
pub const ARTIFACT_MARKER: &str = "# Added when bundling: the library this manifest vouches for.";

/// Returns `manifest` with its top-level `artifact:` block (if any, with the marker comment
/// above it) removed and a fresh one appended. Everything else is kept as written.
pub fn with_artifact_text(manifest: &str, artifact: &Artifact) -> String {
    let lines: Vec<&str> = manifest.lines().collect();
    let is_top_level_key = |l: &str| !l.is_empty() && !l.starts_with([' ', '\t', '#', '-']);
    let mut kept: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("artifact:") {
            if kept.last().is_some_and(|l| l.trim_start().starts_with("# Added ")) {
                kept.pop();
            }
            i += 1;
            while i < lines.len() && !is_top_level_key(lines[i]) && !lines[i].starts_with('#') {
                i += 1;
            }
            continue;
        }
        kept.push(line);
        i += 1;
    }
    while kept.last().is_some_and(|l| l.trim().is_empty()) {
        kept.pop();
    }
    let mut out = kept.join("\n");
    out.push_str(&format!(
        "\n{ARTIFACT_MARKER}\nartifact:\n  file: {}\n  sha256: {}\n",
        yaml_scalar(&artifact.file),
        artifact.sha256
    ));
    if let Some(report) = &artifact.report {
        out.push_str(&format!("  report:\n    file: {}\n    sha256: {}\n", yaml_scalar(&report.file), report.sha256));
    }
    out
}

/// [`with_artifact_text`], then parses the result back: it must be a valid manifest whose
/// `artifact` is exactly `artifact` (else the textual edit went wrong and the error says so).
pub fn pin_artifact(manifest: &str, artifact: &Artifact, origin: &str) -> Result<String, ManifestError> {
    let out = with_artifact_text(manifest, artifact);
    let parsed = Manifest::from_yaml(&out, origin)?;
    if parsed.artifact.as_ref() != Some(artifact) {
        return Err(ManifestError::single(
            origin,
            crate::Issue::new(
                "artifact",
                "the `artifact` section could not be replaced textually",
                "remove the `artifact` section by hand and bundle again",
            ),
        ));
    }
    Ok(out)
}

/// A file name as a YAML scalar: plain when safe, else double-quoted.
fn yaml_scalar(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'));
    if plain { s.to_owned() } else { format!("{s:?}") }
}

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
    out.push('\n');
    push_section(&mut out, artifact);
    out
}

/// The `artifact` section [`with_artifact_text`] appends, marker comment first.
fn push_section(out: &mut String, artifact: &Artifact) {
    out.push_str(&format!(
        "{ARTIFACT_MARKER}\nartifact:\n  file: {}\n  sha256: {}\n",
        yaml_scalar(&artifact.file),
        artifact.sha256
    ));
    if let Some(report) = &artifact.report {
        out.push_str(&format!("  report:\n    file: {}\n    sha256: {}\n", yaml_scalar(&report.file), report.sha256));
    }
}

/// Whether the signed manifest whose bytes hash to `signed_sha256` is `source` with `artifact`
/// appended exactly as [`with_artifact_text`] appends it to a text that ends its last line and
/// has no `artifact` section: `source`, then the section, nothing moved or dropped. Then the
/// signed manifest without its `artifact` is `source` field for field (a top-level key added
/// below the last line of a YAML mapping, on lines of its own, changes no other value), so a
/// plugin whose embedded manifest is `source` agrees with it without `source` being parsed.
/// False says nothing: compare the parsed manifests ([`crate::Manifest::agrees_with_embedded`]).
pub fn signed_as_pinned(source: &str, artifact: &Artifact, signed_sha256: &str) -> bool {
    if !source.ends_with('\n') || source.lines().any(|l| l.starts_with("artifact")) {
        return false;
    }
    let mut text = String::with_capacity(source.len() + 256);
    text.push_str(source);
    push_section(&mut text, artifact);
    crate::checksum::sha256_hex(text.as_bytes()) == signed_sha256
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReportFile;
    use crate::checksum::sha256_hex;

    fn artifact(file: &str) -> Artifact {
        Artifact {
            file: file.into(),
            sha256: "ab".repeat(32),
            report: Some(ReportFile { file: "x.report.json".into(), sha256: "cd".repeat(32) }),
        }
    }

    /// The repository's own plugin manifests (jq-tools is an adapter: no library to pin), pinned
    /// as a bundle pins them: recognised without a parse,
    /// and what that skips holds (the pinned manifest minus `artifact` is the source).
    #[test]
    fn a_pinned_manifest_is_recognised_and_equals_its_source() {
        for source in [
            include_str!("../../../plugins/fs-tools/tool.yaml"),
            include_str!("../../../plugins/text-tools/tool.yaml"),
            include_str!("../../../plugins/time-tools/tool.yaml"),
            include_str!("../test_data/good/minimal.tool.yaml"),
        ] {
            for a in [artifact("libx.so"), Artifact { report: None, ..artifact("lib x.so") }] {
                let pinned = pin_artifact(source, &a, "test").unwrap();
                assert!(signed_as_pinned(source, &a, &sha256_hex(pinned.as_bytes())));
                let signed = Manifest::from_yaml(&pinned, "signed").unwrap();
                let embedded = Manifest::from_yaml(source, "source").unwrap();
                assert_eq!(signed.agrees_with_embedded(&embedded), Ok(()));
            }
        }
    }

    /// Anything but the pinned bytes of exactly this source falls back to the full comparison.
    #[test]
    fn anything_else_is_left_to_the_full_comparison() {
        let source = include_str!("../test_data/good/minimal.tool.yaml");
        let a = artifact("libx.so");
        let signed = sha256_hex(pin_artifact(source, &a, "test").unwrap().as_bytes());
        // Another source, one byte changed.
        assert!(!signed_as_pinned(&source.replacen("description", "Description", 1), &a, &signed));
        // Another artifact.
        assert!(!signed_as_pinned(source, &artifact("liby.so"), &signed));
        // A source that does not end its last line, or has an `artifact` section of its own
        // (which pinning replaces rather than appends to).
        assert!(!signed_as_pinned(source.trim_end(), &a, &signed));
        let own = format!("{source}artifact:\n  file: libx.so\n  sha256: {}\n", "ab".repeat(32));
        let pinned_own = sha256_hex(with_artifact_text(&own, &a).as_bytes());
        assert!(!signed_as_pinned(&own, &a, &pinned_own));
        let full = include_str!("../test_data/good/full.tool.yaml");
        let pinned_full = sha256_hex(pin_artifact(full, &a, "test").unwrap().as_bytes());
        assert!(!signed_as_pinned(full, &a, &pinned_full));
    }

    /// Appending the section below the last line changes no other value, whatever that line
    /// is: block scalars of every chomping, a quoted or plain scalar, a flow collection, a
    /// comment, trailing blank lines.
    #[test]
    fn the_appended_section_changes_no_other_value() {
        let head = include_str!("../test_data/good/minimal.tool.yaml");
        let endings = [
            "notes: |\n  one\n  two\n",
            "notes: |+\n  one\n\n",
            "notes: |+\n  one\n",
            "notes: |-\n  one\n",
            "notes: >\n  folded\n  text\n\n\n",
            "notes: \"quoted\n  on two lines\"\n",
            "notes: plain\n  continued\n",
            "notes: [a, b,\n  c]\n",
            "notes: x # a comment\n# another\n",
            "notes: x\n\n\n",
        ];
        let a = artifact("libx.so");
        for ending in endings {
            let source = format!("{head}{ending}");
            let mut appended = source.clone();
            push_section(&mut appended, &a);
            let parse = |t: &str| crate::yaml::parse(t).unwrap();
            let (mut with, without) = (parse(&appended), parse(&source));
            let removed = with.as_object_mut().unwrap().remove("artifact");
            assert!(removed.is_some(), "{ending:?}");
            assert_eq!(with, without, "{ending:?}");
        }
    }
}

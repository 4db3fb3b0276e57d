//! `quiver sign`: signs a bundle manifest's bytes into `MANIFEST.minisig`, optionally pinning
//! its library (`artifact` section) first, and with `--report` shipping the library's load report
//! beside it (`NAME.report.json`, pinned as `artifact.report`): what the library says about
//! itself when loaded, obtained by loading it in a sandboxed worker process (never in this
//! process), so that a host without a kept report lists the plugin without loading it first.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use quiver_manifest::{KeyPair, Manifest};

use crate::GlobalArgs;
use crate::bundle::{artifact_for, set_artifact, ship_report, write_atomic};

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The bundle manifest (`NAME.tool.yaml`).
    pub manifest: PathBuf,
    /// The minisign secret key (from `quiver keygen`).
    #[arg(long, value_name = "SECRET_KEY")]
    pub key: PathBuf,
    /// Set the manifest's `artifact` to this library (file name and sha256) before signing; the
    /// library must sit beside the manifest.
    #[arg(long, value_name = "LIB")]
    pub library: Option<PathBuf>,
    /// Also ship the library's load report in the bundle (`NAME.report.json` beside the
    /// manifest, its sha256 signed as `artifact.report`), so a host lists the plugin without
    /// loading it first. The library is loaded for this in a sandboxed worker process and checked
    /// against the manifest as at a load. Needs --library.
    #[arg(long, requires = "library")]
    pub report: bool,
}

pub fn run(g: &GlobalArgs, a: &SignArgs) -> Result<()> {
    let origin = a.manifest.display().to_string();
    let mut text =
        std::fs::read_to_string(&a.manifest).with_context(|| format!("cannot read the manifest {origin}"))?;
    if !a.manifest.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".tool.yaml")) {
        // The host scans only `*.tool.yaml`; signing (and pinning the library into) any other file,
        // such as a plugin's source `tool.yaml`, makes a bundle nothing loads.
        let id = Manifest::from_yaml(&text, &origin).map(|m| m.id).unwrap_or_else(|_| "ID".to_owned());
        let dir = a.manifest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        return Err(crate::UsageError(format!(
            "{origin}: a host loads only bundle manifests named NAME.tool.yaml; copy it to {} (beside the library) and sign that",
            dir.join(format!("{id}.tool.yaml")).display()
        ))
        .into());
    }
    let key_text =
        std::fs::read_to_string(&a.key).with_context(|| format!("cannot read the secret key {}", a.key.display()))?;
    let pair = KeyPair::from_secret_key_text(&key_text).with_context(|| {
        format!("{} is not an unencrypted minisign secret key (make one with `quiver keygen`)", a.key.display())
    })?;
    if let Some(lib) = &a.library {
        let mut artifact = artifact_for(&a.manifest, lib)?;
        if a.report {
            let manifest = Manifest::from_yaml(&text, &origin)?;
            let policy = crate::settings::default_isolation()?;
            let report = quiver_lifecycle::describe_in_worker(&a.manifest, manifest, lib, &policy).map_err(|e| {
                anyhow::anyhow!(
                    "{origin}: the load check of {} failed ({} check): {}",
                    lib.display(),
                    e.stage.as_str(),
                    e.message
                )
            })?;
            artifact.report = Some(ship_report(&a.manifest, &report)?);
        }
        let updated = set_artifact(&text, &artifact, &origin)?;
        if updated != text {
            write_atomic(&a.manifest, updated.as_bytes())?;
            text = updated;
        }
    }
    let manifest = Manifest::from_yaml(&text, &origin)?;
    // The trusted comment binds the plugin id, version and library (checked by the host); for
    // an adapter bundle (no library), the manifest bytes' own sha256.
    let comment = match (&manifest.artifact, &manifest.adapter) {
        (Some(x), _) => quiver_manifest::bundle_comment(&manifest.id, &manifest.version.to_string(), &x.sha256),
        (None, Some(_)) => quiver_manifest::bundle_comment(
            &manifest.id,
            &manifest.version.to_string(),
            &quiver_manifest::sha256_hex(text.as_bytes()),
        ),
        // Every host refuses a plugin bundle that pins no library: no signature is written.
        (None, None) => {
            return Err(crate::UsageError(format!(
                "{origin} has no `artifact` section, so every host would refuse this bundle; sign with \
                 --library LIB to pin the plugin library (add --report to ship its load report)"
            ))
            .into());
        }
    };
    let signature = quiver_manifest::sign(&pair, text.as_bytes(), &comment);
    let sig_path = quiver_lifecycle::signature_path(&a.manifest);
    write_atomic(&sig_path, signature.as_bytes())?;
    let key_id = pair.key_id();
    if g.json {
        let out = serde_json::json!({
            "manifest": a.manifest,
            "signature": sig_path,
            "key_id": key_id,
            "id": manifest.id,
            "version": manifest.version.to_string(),
            "artifact": manifest.artifact.as_ref().map(|x| serde_json::json!({
                "file": x.file, "sha256": x.sha256,
                "report": x.report.as_ref().map(|r| serde_json::json!({"file": r.file, "sha256": r.sha256})),
            })),
        });
        println!("{out:#}");
    } else {
        println!("signed {} {} with key {key_id}", manifest.id, manifest.version);
        if let Some(x) = &manifest.artifact {
            println!("artifact {} sha256 {}", x.file, x.sha256);
            if let Some(r) = &x.report {
                println!("load report {} sha256 {}", r.file, r.sha256);
            }
        }
        println!("wrote {}", sig_path.display());
    }
    Ok(())
}

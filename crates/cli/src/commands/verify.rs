//! `quiver verify`: checks bundles the way the host does before loading them (signature,
//! manifest, library, checksum), then, for a bundle that passed them all, the load check: the
//! library is opened in a sandboxed worker process (never in this process) and must implement
//! exactly the tools its manifest names, with actions and schemas that compile. `--no-load`
//! skips the load check, so no plugin code runs at all.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use quiver_lifecycle::{BundleError, Host, Stage, check_in_worker, verify_bundle};
use serde_json::json;

use crate::settings::Settings;
use crate::{GlobalArgs, Reported};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Bundle manifests (`*.tool.yaml`) or folders scanned like the host does
    /// [default: the configured plugins folder].
    pub paths: Vec<PathBuf>,
    /// Skip the load check: no plugin code runs, and a library that lacks a tool its manifest
    /// names is not caught.
    #[arg(long)]
    pub no_load: bool,
}

/// The outcome for one bundle.
enum Checked {
    Ok { path: PathBuf, id: String, version: String, sha256: String, signer: Option<String>, source: &'static str },
    Failed(BundleError),
}

/// Expands folders into their bundle manifests.
fn manifests(paths: &[PathBuf]) -> Vec<Result<PathBuf, BundleError>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            match Host::find_manifests(p) {
                Ok(found) if found.is_empty() => out.push(Err(BundleError {
                    bundle: p.clone(),
                    stage: Stage::Read,
                    message: format!(
                        "no bundle manifests (*.tool.yaml) in {} or its subfolders; build them with `cargo xtask build-plugins`",
                        p.display()
                    ),
                })),
                Ok(found) => out.extend(found.into_iter().map(Ok)),
                Err(e) => out.push(Err(BundleError {
                    bundle: p.clone(),
                    stage: Stage::Read,
                    message: format!("cannot read the folder: {e}"),
                })),
            }
        } else if !p.exists() {
            out.push(Err(BundleError {
                bundle: p.clone(),
                stage: Stage::Read,
                message: "no such file or folder; name a bundle manifest (*.tool.yaml) or a plugins folder (build the bundled plugins with `cargo xtask build-plugins`)".to_owned(),
            }));
        } else {
            out.push(Ok(p.clone()));
        }
    }
    out
}

pub fn run(g: &GlobalArgs, a: &VerifyArgs) -> Result<()> {
    let settings = Settings::load(g)?;
    let policy = &settings.host.verify;
    let paths = if a.paths.is_empty() { vec![settings.host.plugins_dir.clone()] } else { a.paths.clone() };
    let results: Vec<Checked> = manifests(&paths)
        .into_iter()
        .map(|m| match m.and_then(|path| verify_bundle(&path, policy)) {
            Ok(b) => {
                let ok = Checked::Ok {
                    source: b.manifest.adapter.as_ref().map(|a| a.label()).unwrap_or("plugin"),
                    path: b.manifest_path.clone(),
                    id: b.manifest.id.clone(),
                    version: b.manifest.version.to_string(),
                    sha256: b.sha256.clone(),
                    signer: b.signer_key_id.clone(),
                };
                // An adapter bundle has no library to load: it is resolved as the host resolves
                // it (its program, environment, header variables; no code of it runs).
                if b.manifest.adapter.is_some() {
                    return match resolve_adapter(&b.manifest, &settings.host.isolation.working_dir) {
                        Ok(()) => ok,
                        Err(message) => Checked::Failed(BundleError {
                            bundle: b.manifest_path.clone(),
                            stage: Stage::Adapter,
                            message,
                        }),
                    };
                }
                if a.no_load {
                    return ok;
                }
                match check_in_worker(b, &settings.host.isolation) {
                    Ok(()) => ok,
                    Err(e) => Checked::Failed(e),
                }
            }
            Err(e) => Checked::Failed(e),
        })
        .collect();
    let n_failed = results.iter().filter(|r| matches!(r, Checked::Failed(_))).count();

    if g.json {
        let bundles: Vec<_> = results
            .iter()
            .map(|r| match r {
                Checked::Ok { path, id, version, sha256, signer, source } => json!({
                    "bundle": path, "ok": true, "id": id, "version": version, "sha256": sha256, "source": source,
                    "signer_key_id": signer, "signer": signer.as_deref().and_then(|k| settings.key_name(k)),
                }),
                Checked::Failed(e) => json!({
                    "bundle": e.bundle, "ok": false, "stage": e.stage.as_str(), "message": e.message,
                }),
            })
            .collect();
        let out = json!({ "bundles": bundles, "n_ok": results.len() - n_failed, "n_failed": n_failed });
        println!("{out:#}");
    } else {
        for r in &results {
            match r {
                Checked::Ok { path, id, version, sha256, signer, source } => {
                    let signer = match signer {
                        Some(k) => match settings.key_name(k) {
                            Some(name) => format!("key {k} ({name})"),
                            None => format!("key {k}"),
                        },
                        None => "UNSIGNED (allow_unsigned)".to_owned(),
                    };
                    println!("OK      {}  {id} {version} ({source})  sha256 {sha256}  signed by {signer}", show(path));
                }
                Checked::Failed(e) => {
                    println!("FAILED  {}  {} check: {}", show(&e.bundle), e.stage.as_str(), e.message);
                }
            }
        }
        let how = if a.no_load {
            "no plugin code was loaded"
        } else {
            "libraries were opened only in sandboxed worker processes, after every other check"
        };
        println!("{} verified, {n_failed} failed ({how})", results.len() - n_failed);
    }
    if n_failed > 0 { Err(Reported.into()) } else { Ok(()) }
}

fn show(p: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    cwd.and_then(|c| p.strip_prefix(c).ok().map(|r| r.display().to_string())).unwrap_or_else(|| p.display().to_string())
}

/// What the host does with an adapter bundle before it serves it, short of running it: find
/// its program, read its environment and header variables, parse its templates.
fn resolve_adapter(manifest: &quiver_manifest::Manifest, working_dir: &std::path::Path) -> Result<(), String> {
    use quiver_lifecycle::adapter;
    let resolved = adapter::resolve(manifest, working_dir, |k| std::env::var(k).ok())?;
    adapter::Adapter::new(manifest, resolved, adapter::in_process_placement("verify")).map(|_| ())
}

//! `quiver contract-test PLUGIN_DIR --library LIB` (hidden; driven by `cargo xtask
//! contract-test`): proves a plugin works through the real host and router.
//!
//! 1. The source manifest `PLUGIN_DIR/tool.yaml` validates.
//! 2. A bundle is made in a temporary folder (library copy, manifest + `artifact`, signature by a
//!    throwaway key) and loaded through [`quiver_lifecycle::Host`] trusting only that key.
//! 3. Every case of `PLUGIN_DIR/fixtures/*.json` runs through [`quiver_router::Router::call`]
//!    (typed lane, all scopes, confirmed), and the response is checked against `expect`.
//! 4. Failure paths of every tool: arguments that are not an object, an empty object when the
//!    schema requires fields (both must be `invalid_arguments`), and a call cancelled before it
//!    runs (`cancelled`), after which the same call must still succeed.
//! 5. Every `examples` entry of each visible tool finds that tool among the first `--k` results
//!    of a search over the **whole configured catalog**: the plugin is loaded together with the
//!    other bundles of the configured plugins folder (the host's `quiver.yaml`).
//! 6. No tool name or alias clashes with another plugin of the configured folder.
//! 7. With a `config_schema` in the manifest: every fixture case's `config` fits it.
//! 8. Versioning: `CHANGELOG.md` has a section for the manifest's version; compared with the
//!    last committed `tool.yaml` (git `HEAD`), the version does not go down and no tool
//!    disappears without an alias keeping its name or a `lifecycle.replacement`.
//! 9. The worker pass: the fixture cases (in file order, against a fresh private copy of the
//!    fixtures) and the failure paths of step 4 run again through the plugin loaded as a host
//!    runs a bundle it does not trust in-process: in a `quiver worker` process of its own,
//!    sandboxed (Landlock) to what the manifest's `sandbox:` declares, with the configured
//!    host's worker settings (`isolation.worker`: limits, environment). Steps 2 and 3 load the
//!    plugin in-process, where nothing confines it, so a fixture that reads or writes a path its
//!    `sandbox:` does not grant (or connects without `network: true`) would pass there and fail
//!    in production. A case that passes in-process and fails in the worker is a failure
//!    (`worker:FILE` rows) naming the case, the tool, what the sandbox granted and the likely
//!    fix: the `sandbox.filesystem` entry to declare in tool.yaml (`config: KEY` when the case's
//!    `config` names the path, `access: read_write` when the tool writes through a read grant).
//!    Sandbox paths are resolved as a host resolves them: a `config: KEY` grant takes the case's
//!    `config` as the operator's `plugin_config` (one worker per distinct set of grants), so
//!    `{"config": {"root": "${FIXTURE_DIR}/root"}}` grants that folder of the private copy to a
//!    plugin declaring `{config: root}`; a fixed `path:` cannot name the private copy, so files
//!    a fixture points a tool at are granted through a configuration setting; relative values
//!    and `default: working_dir` are the folder contract-test runs in. Where the kernel has no
//!    Landlock the worker would confine nothing: the pass is skipped and a `SKIP` row says so
//!    and why (never a silent pass).
//!
//! `--load-only` stops after loading (manifest ↔ library, actions, clashes): the check
//! `cargo xtask build-plugins` runs on every freshly built library.
//!
//! A declarative adapter bundle (`adapter:` in tool.yaml) runs without `--library`: its manifest
//! is the bundle. `${TEST_ENDPOINT}` in a case becomes `QUIVER_TEST_ENDPOINT` (the local HTTP
//! test endpoint `cargo xtask contract-test` starts for HTTP adapters).
//!
//! Fixture format (one case object or an array of them):
//! `{"name", "tool", "arguments", "config"?, "expect": {"status", "outputs"?, "error_code"?}}`.
//! `outputs` is a subset match (objects recursively: every key given must be present and equal;
//! arrays and scalars compared whole). The text `${FIXTURE_DIR}` anywhere in a case becomes the
//! absolute path of a private copy of the fixtures folder, so cases can never change the sources
//! (the worker pass has a copy of its own, so it starts from the same files as the in-process run).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use quiver_abi::Status;
use quiver_abi::fixtures::{check_subset, substitute_fixture_dir};
use quiver_catalog::{Access, Catalog, SearchRequest, search_catalog};
use quiver_lifecycle::worker::protocol::SandboxRules;
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, VerifyPolicy, sandbox_rules};
use quiver_manifest::{Artifact, Isolation, KeyPair, Manifest, PathAccess, SideEffects, TrustedKeys};
use quiver_router::{Call, Caller, Router, RouterSettings};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::bundle::{set_artifact, write_atomic};
use crate::commands::list::print_table;
use crate::settings::Settings;
use crate::{GlobalArgs, Reported};

#[derive(Debug, Args)]
pub struct ContractTestArgs {
    /// The plugin's source folder (with tool.yaml and fixtures/).
    pub plugin_dir: PathBuf,
    /// The built plugin library (not for a declarative adapter bundle, which has none).
    #[arg(long, value_name = "LIB")]
    pub library: Option<PathBuf>,
    /// Each example must find its tool among the first K search results of the whole catalog.
    #[arg(long, value_name = "K", default_value_t = 3, env = "QUIVER_CONTRACT_K")]
    pub k: usize,
    /// Only load the plugin with the configured ones (manifest against library, actions, name
    /// clashes); skip fixtures, examples and versioning.
    #[arg(long)]
    pub load_only: bool,
}

/// One fixture case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    tool: String,
    #[serde(default = "empty_object")]
    arguments: Value,
    #[serde(default)]
    config: Option<Value>,
    expect: Expect,
}

fn empty_object() -> Value {
    json!({})
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: Status,
    #[serde(default)]
    outputs: Option<Value>,
    #[serde(default)]
    error_code: Option<String>,
}

/// The result of one check.
struct Outcome {
    file: String,
    name: String,
    passed: bool,
    /// Not run, and `detail` says why (counted as neither passed nor failed).
    skipped: bool,
    detail: String,
}

/// Reads `dir/*.json` (sorted): each file one case or an array of cases.
fn read_cases(dir: &Path) -> Result<Vec<(String, Case)>> {
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => bail!("cannot read {}: {e}", dir.display()),
    };
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let text = fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", f.display()))?;
        let items = match v {
            Value::Array(a) => a,
            one => vec![one],
        };
        for (i, item) in items.into_iter().enumerate() {
            let case: Case = serde_json::from_value(item).with_context(|| {
                format!("{}: case {i} is not a fixture case (fields: name, tool, arguments, config?, expect{{status, outputs?, error_code?}})", f.display())
            })?;
            out.push((name.clone(), case));
        }
    }
    Ok(out)
}

/// [`quiver_abi::fixtures::copy_tree`], its error naming both folders.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    quiver_abi::fixtures::copy_tree(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))
}

/// A bundle of the configured plugins folder: its manifest and folder.
struct Neighbour {
    manifest: Manifest,
    manifest_path: PathBuf,
}

/// The bundles of the configured plugins folder other than plugin `id` (manifests only: no code
/// is read here). Unreadable ones are skipped; the host reports them when it scans.
fn neighbours(plugins_dir: &Path, id: &str) -> Vec<Neighbour> {
    let Ok(rd) = fs::read_dir(plugins_dir) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(files) = fs::read_dir(&d) else { continue };
        for f in files.flatten().map(|e| e.path()) {
            let is_bundle = f.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".tool.yaml"));
            if !is_bundle {
                continue;
            }
            let Ok(text) = fs::read_to_string(&f) else { continue };
            let Ok(manifest) = Manifest::from_yaml(&text, &f.display().to_string()) else { continue };
            if manifest.id != id && (manifest.artifact.is_some() || manifest.adapter.is_some()) {
                out.push(Neighbour { manifest, manifest_path: f });
            }
        }
    }
    out
}

/// Tool names and aliases of `plugin` that another plugin of the configured folder also uses.
fn clashes(plugin: &Manifest, plugin_path: &Path, others: &[Neighbour], origin: &str) -> Vec<Outcome> {
    let names = |m: &Manifest| -> Vec<(String, String)> {
        m.tools
            .iter()
            .flat_map(|t| {
                std::iter::once((t.name.clone(), format!("tool `{}`", t.name)))
                    .chain(t.aliases.iter().map(|a| (a.name.clone(), format!("alias `{}` of `{}`", a.name, t.name))))
            })
            .collect()
    };
    let mut out = Vec::new();
    for (name, what) in names(plugin) {
        for other in others {
            if let Some((_, theirs)) = names(&other.manifest).into_iter().find(|(n, _)| *n == name) {
                out.push(Outcome {
                    skipped: false,
                    file: "names".into(),
                    name: format!("{what} is unique"),
                    passed: false,
                    detail: format!(
                        "{what} of `{}` clashes with {theirs} of `{}` ({}); rename it in {} (and in export_plugin!), or set `name_conflicts: namespace` in {origin} to expose both as `plugin.tool`",
                        plugin.id,
                        other.manifest.id,
                        other.manifest_path.display(),
                        plugin_path.display()
                    ),
                });
            }
        }
    }
    out
}

/// Makes a signed bundle of the plugin in `dir`, copies the configured neighbours' bundles
/// beside it, and loads them all through the real host; returns the host.
fn load_bundle(
    plugin_dir: &Path,
    library: Option<&Path>,
    dir: &Path,
    others: &[Neighbour],
    trusted: &TrustedKeys,
    isolation: IsolationPolicy,
) -> Result<Arc<Host>> {
    let source_path = plugin_dir.join("tool.yaml");
    let source = fs::read_to_string(&source_path).with_context(|| format!("cannot read {}", source_path.display()))?;
    let manifest = Manifest::from_yaml(&source, &source_path.display().to_string())?;
    let bundle_dir = dir.join("plugins").join(&manifest.id);
    fs::create_dir_all(&bundle_dir)?;
    let manifest_path = bundle_dir.join(format!("{}.tool.yaml", manifest.id));
    let text = match (library, &manifest.adapter) {
        // An adapter bundle is its manifest, signed as it is.
        (None, Some(_)) => source.clone(),
        (Some(library), None) => {
            let bytes = fs::read(library).with_context(|| format!("cannot read the library {}", library.display()))?;
            let file = library.file_name().and_then(|n| n.to_str()).context("library without a file name")?.to_owned();
            fs::write(bundle_dir.join(&file), &bytes)?;
            let artifact = Artifact { file, sha256: quiver_manifest::sha256_hex(&bytes), report: None };
            set_artifact(&source, &artifact, &manifest_path.display().to_string())?
        }
        (Some(_), Some(_)) => {
            bail!("{} declares an adapter, which has no library: run without --library", source_path.display())
        }
        (None, None) => bail!("{} is a plugin library's manifest: pass --library LIB", source_path.display()),
    };
    write_atomic(&manifest_path, text.as_bytes())?;
    let key = KeyPair::generate();
    let signature = quiver_manifest::sign_bundle(&key, &text, &manifest_path.display().to_string())?;
    write_atomic(&quiver_lifecycle::signature_path(&manifest_path), signature.as_bytes())?;
    // The neighbours, as signed: manifest, signature, library and shipped load report only.
    for n in others {
        let Some(from) = n.manifest_path.parent() else { continue };
        let to = dir.join("plugins").join(format!("neighbour-{}", n.manifest.id));
        fs::create_dir_all(&to)?;
        let name = n.manifest_path.file_name().context("bundle manifest without a name")?;
        fs::copy(&n.manifest_path, to.join(name))?;
        let sig = quiver_lifecycle::signature_path(&n.manifest_path);
        if sig.is_file() {
            fs::copy(&sig, quiver_lifecycle::signature_path(&to.join(name)))?;
        }
        let files =
            n.manifest.artifact.iter().flat_map(|a| std::iter::once(&a.file).chain(a.report.as_ref().map(|r| &r.file)));
        for file in files {
            if from.join(file).is_file() {
                fs::copy(from.join(file), to.join(file))?;
            }
        }
    }

    let settings = HostSettings {
        plugins_dir: dir.join("plugins"),
        verify: VerifyPolicy {
            trusted: trusted.clone().with("contract-test", "throwaway", key.public_key().clone()),
            allow_unsigned: false,
            max_library_bytes: 1 << 30,
            // A throwaway folder of our own making: permissions and rollback do not apply.
            strict: false,
            // Declared secrets count as supplied so the bundles load; their tools get no
            // values here (fixtures of such tools run without them).
            secrets: std::iter::once(&manifest)
                .chain(others.iter().map(|n| &n.manifest))
                .map(|m| {
                    let names = m.tools.iter().flat_map(|t| &t.secrets).map(|n| (n.clone(), Ok(()))).collect();
                    (m.id.clone(), names)
                })
                .collect(),
            // Each fixture case brings its configuration (checked by `check_fixture_configs`).
            plugin_config: None,
            ..VerifyPolicy::default()
        },
        cache_dir: Some(dir.join("cache")),
        conflicts: Default::default(),
        isolation,
    };
    let host = Host::new(settings).context("cannot start the plugin host")?;
    let report = host.rescan();
    for e in &report.rejected {
        if e.bundle == manifest_path {
            bail!("the host rejected the bundle: {} check failed: {}", e.stage.as_str(), e.message);
        }
        eprintln!(
            "note: a configured bundle was not loaded ({}: {}); examples are ranked without it",
            e.bundle.display(),
            e.message
        );
    }
    Ok(Arc::new(host))
}

/// The failure paths every tool must handle: bad input, and a cancelled call that leaves the
/// tool working. `router` takes the calls with bad arguments; `route` picks the router a
/// fixture case runs on (`None`: not rerun after its cancelled call).
fn check_failure_paths<'r>(
    rt: &tokio::runtime::Runtime,
    router: &'r Router,
    route: &dyn Fn(&Case) -> Option<&'r Router>,
    catalog: &Catalog,
    id: &str,
    cases: &[Case],
) -> Vec<Outcome> {
    let caller = || Caller::new("contract-test", Access::unrestricted());
    let call =
        |name: &str, args: Value| rt.block_on(router.call(Call::new(name, args, caller()).confirmed(true))).response;
    let mut out = Vec::new();
    for r in catalog.tools().iter().filter(|r| catalog.plugin_of(r).id() == id) {
        let def = catalog.def(r);
        if !def.spec.lifecycle.state.is_visible() {
            continue;
        }
        let mut push = |case: &str, result: Result<(), String>| {
            out.push(Outcome {
                skipped: false,
                file: format!("failure:{}", r.name),
                name: case.to_owned(),
                passed: result.is_ok(),
                detail: result.err().unwrap_or_default(),
            });
        };
        let expect_code = |resp: &quiver_abi::ToolResponse, code: &str| match &resp.error {
            Some(e) if e.code == code => Ok(()),
            Some(e) => Err(format!("expected {code}, got {}: {}", e.code, e.message)),
            None => Err(format!("expected {code}, got a result: {}", resp.outputs)),
        };
        push(
            "arguments that are not an object",
            expect_code(&call(&r.name, json!("not an object")), "invalid_arguments"),
        );
        let requires = def.input_schema.get("required").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if requires {
            push(
                "an empty object when fields are required",
                expect_code(&call(&r.name, json!({})), "invalid_arguments"),
            );
        }
        // A cancelled call, then the same call again: the tool must still work.
        let found = cases.iter().find(|c| c.tool == r.name && c.expect.status == Status::Ok);
        if let Some((case, router)) = found.and_then(|c| Some((c, route(c)?))) {
            let mut c = Call::new(&case.tool, case.arguments.clone(), caller()).confirmed(true);
            c.config = case.config.clone().unwrap_or(Value::Null);
            c.cancel.cancel();
            let cancelled = rt.block_on(router.call(c)).response;
            push(&format!("cancelled call of fixture `{}`", case.name), expect_code(&cancelled, "cancelled"));
            push(&format!("fixture `{}` after a cancelled call", case.name), run_case(rt, router, case));
        }
    }
    out
}

/// What the fixture cases need of the worker pass: the plugin, where its fixtures are, and
/// the host's worker settings.
struct WorkerPass<'a> {
    plugin_dir: &'a Path,
    library: Option<&'a Path>,
    manifest: &'a Manifest,
    /// A folder of its own (bundles, one per worker).
    dir: &'a Path,
    trusted: &'a TrustedKeys,
    /// The configured host's isolation (worker program, limits, environment, working folder).
    isolation: &'a IsolationPolicy,
}

/// The fixture cases (in file order, against a fresh private copy of the fixtures: `cases` are
/// substituted for it) and the failure paths run again through the plugin loaded as a host
/// runs a bundle it does not trust in-process: in a worker process of its own, sandboxed to
/// what its manifest's `sandbox:` declares. Sandbox paths declared by configuration key are
/// resolved against each case's `config` as the operator's `plugin_config`, so one worker runs
/// per distinct sandbox the cases' configurations grant. `in_process[i]` says whether case `i`
/// passed in-process: a case that passes there and fails here is reported with the tool and
/// the likely fix. Without Landlock the pass is skipped, and one row says so and why.
fn worker_pass(
    rt: &tokio::runtime::Runtime,
    w: &WorkerPass<'_>,
    cases: &[(String, Case)],
    in_process: &[bool],
) -> Vec<Outcome> {
    let id = &w.manifest.id;
    let row = |name: &str, passed: bool, detail: String| Outcome {
        skipped: false,
        file: "worker".into(),
        name: name.to_owned(),
        passed,
        detail,
    };
    if cases.is_empty() {
        return Vec::new();
    }
    if w.isolation.worker.is_none() {
        return vec![row(
            "fixture cases in a sandboxed worker",
            false,
            "this host has no worker program to run the plugin in; run contract-test with the `quiver` binary".into(),
        )];
    }
    // One worker per distinct sandbox the cases' configurations resolve to (in the order cases
    // first use it): cases whose `config` grants the same paths share a worker.
    let rules_of = |c: &Case| sandbox_rules(&w.manifest.sandbox, c.config.as_ref(), &w.isolation.working_dir);
    let mut sandboxes: Vec<SandboxRules> = Vec::new();
    let mut configs: Vec<Option<&Value>> = Vec::new();
    for (_, c) in cases {
        let rules = rules_of(c);
        if !sandboxes.contains(&rules) {
            sandboxes.push(rules);
            configs.push(c.config.as_ref());
        }
    }
    // The workers start side by side (each reads, hashes and sends the library, then opens it).
    let loaded: Vec<Result<Arc<Host>>> = std::thread::scope(|scope| {
        let starts: Vec<_> = configs
            .iter()
            .enumerate()
            .map(|(i, config)| {
                let isolation = IsolationPolicy {
                    default: Some(Isolation::Process),
                    plugins: Default::default(),
                    keys: Default::default(),
                    first_party: Default::default(),
                    plugin_config: config
                        .map(|c| std::iter::once((id.clone(), c.clone())).collect())
                        .unwrap_or_default(),
                    start_cache: None,
                    ..w.isolation.clone()
                };
                let dir = w.dir.join(format!("worker-{i}"));
                scope.spawn(move || load_bundle(w.plugin_dir, w.library, &dir, &[], w.trusted, isolation))
            })
            .collect();
        starts
            .into_iter()
            .map(|s| s.join().unwrap_or_else(|_| Err(anyhow::anyhow!("loading the bundle panicked"))))
            .collect()
    });
    let mut hosts = Vec::new();
    for (config, host) in configs.iter().zip(loaded) {
        match host {
            Ok(host) => hosts.push(host),
            Err(e) => {
                let with = config.map(|c| format!(" with config {c}")).unwrap_or_default();
                return vec![row(
                    "the plugin loads in a sandboxed worker",
                    false,
                    format!(
                        "it loads in-process but not in a worker{with}: {e:#}; {}",
                        sandbox_fix(w.manifest, None, *config, &w.isolation.working_dir)
                    ),
                )];
            }
        }
    }
    let catalog = hosts[0].catalog();
    let placement = catalog
        .plugins()
        .iter()
        .find(|p| p.id() == id)
        .map(|p| p.backend.placement())
        .map(|p| p.detail)
        .unwrap_or_default();
    if placement.contains("NOT SANDBOXED") || !placement.contains("landlock") {
        return vec![Outcome {
            skipped: true,
            ..row(
                "fixture cases in a sandboxed worker",
                true,
                format!(
                    "SKIPPED: the worker is not sandboxed on this machine ({placement}); the cases ran in-process only, so a path or the network that `sandbox:` does not grant is not caught here"
                ),
            )
        }];
    }
    let routers: Vec<Router> = hosts.iter().map(|h| Router::new(h.clone(), RouterSettings::default())).collect();
    let route = |c: &Case| {
        let rules = rules_of(c);
        sandboxes.iter().position(|s| *s == rules).map(|i| &routers[i])
    };
    let mut out = vec![row(
        "fixture cases in a sandboxed worker",
        true,
        format!(
            "{} case(s) in {} worker process(es), one per sandbox the cases' `config` grants; {placement}",
            cases.len(),
            hosts.len()
        ),
    )];
    for (i, (file, case)) in cases.iter().enumerate() {
        let Some(router) = route(case) else { continue };
        let result = run_case(rt, router, case).map_err(|problem| {
            if in_process.get(i).copied().unwrap_or(false) {
                format!(
                    "passes in-process but fails in a sandboxed worker: {problem}; {}",
                    sandbox_fix(w.manifest, Some(&case.tool), case.config.as_ref(), &w.isolation.working_dir)
                )
            } else {
                format!("fails in the sandboxed worker too: {problem}")
            }
        });
        out.push(Outcome {
            skipped: false,
            file: format!("worker:{file}"),
            name: case.name.clone(),
            passed: result.is_ok(),
            detail: result.err().unwrap_or_default(),
        });
    }
    // A case that failed here is not run again after a cancelled call (its row says why).
    let failed: Vec<&str> =
        out.iter().filter(|o| !o.passed && o.file.starts_with("worker:")).map(|o| o.name.as_str()).collect();
    let route_passed = |c: &Case| if failed.contains(&c.name.as_str()) { None } else { route(c) };
    let substituted: Vec<Case> = cases.iter().map(|(_, c)| c.clone()).collect();
    let paths = check_failure_paths(rt, &routers[0], &route_passed, &catalog, id, &substituted);
    for mut o in paths {
        o.file = format!("worker:{}", o.file);
        out.push(o);
    }
    out
}

/// The likely fix of a case that passes in-process and fails in a sandboxed worker, naming the
/// tool (if any), what its sandbox grants for the case's `config`, and the `sandbox:` field of
/// tool.yaml to declare.
fn sandbox_fix(manifest: &Manifest, tool: Option<&str>, config: Option<&Value>, working_dir: &Path) -> String {
    let spec = &manifest.sandbox;
    let granted = sandbox_rules(spec, config, working_dir).paths;
    let granted = if granted.is_empty() {
        "no path".to_owned()
    } else {
        granted
            .iter()
            .map(|p| format!("{} ({})", p.path, if p.write { "read_write" } else { "read" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let def = tool.and_then(|t| manifest.tool(t));
    let writes = def.is_some_and(|t| t.side_effects != SideEffects::Read);
    let who = match tool {
        Some(t) => format!("tool `{t}` likely opens a file or connects where its sandbox does not let it"),
        None => "the plugin likely opens a file or connects where its sandbox does not let it".to_owned(),
    };
    // Configuration settings of the case that name paths: the usual way fixtures point a tool
    // at `${FIXTURE_DIR}`.
    let path_settings: Vec<&str> = config
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(_, v)| {
                    v.as_str().is_some_and(|s| s.starts_with('/') || s.starts_with('.') || s.contains('/'))
                })
                .map(|(k, _)| k.as_str())
                .collect()
        })
        .unwrap_or_default();
    let fix = path_settings
        .iter()
        .find_map(|key| match spec.filesystem.iter().find(|g| g.config.as_deref() == Some(*key)) {
            None => Some(format!(
                "declare it under `sandbox.filesystem` in tool.yaml: `- {{config: {key}, access: {}}}` grants the path the plugin's `{key}` setting names (the case's `config.{key}`)",
                if writes { "read_write" } else { "read" }
            )),
            Some(g) if g.access == PathAccess::Read && writes => Some(format!(
                "the grant `config: {key}` under `sandbox.filesystem` in tool.yaml has `access: read`, and the tool writes: set `access: read_write`"
            )),
            Some(_) => None,
        })
        .unwrap_or_else(|| {
            format!(
                "declare what it opens under `sandbox:` in tool.yaml: `sandbox.filesystem` entries (`config: KEY` for a path named by a `plugin_config` setting, `path: /absolute` for a fixed one; `access: read_write` to write){}",
                if spec.network { "" } else { ", and `sandbox.network: true` to use TCP" }
            )
        });
    format!("{who} (granted: {granted}); {fix}")
}

/// With a `config_schema`: every fixture case's `config` fits it (a case whose configuration
/// the host would refuse at load tests what cannot happen).
fn check_fixture_configs(manifest: &Manifest, cases: &[Case]) -> Option<Outcome> {
    manifest.config_schema.as_ref()?;
    let given: Vec<&Case> = cases.iter().filter(|c| c.config.is_some()).collect();
    let problem = given.iter().find_map(|c| {
        let issues = manifest.config_issues(c.config.as_ref());
        Some(format!("case `{}`: {}", c.name, issues.first()?))
    });
    Some(Outcome {
        skipped: false,
        file: "config".into(),
        name: "every fixture's config fits the manifest's config_schema".into(),
        passed: problem.is_none(),
        detail: problem.unwrap_or_else(|| format!("{} case(s) with a config", given.len())),
    })
}

/// The `## X.Y.Z` section headings of a changelog (also `## [X.Y.Z]` and `## X.Y.Z - date`).
fn changelog_versions(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|h| {
            h.trim().trim_start_matches('[').split([']', ' ']).next().map(|v| v.trim_start_matches('v').to_owned())
        })
        .filter(|v| semver::Version::parse(v).is_ok())
        .collect()
}

/// The manifest as last committed (`git show HEAD:<dir>/tool.yaml`); `None` outside git or for a
/// plugin never committed.
fn committed_manifest(plugin_dir: &Path) -> Option<Manifest> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(plugin_dir)
        .args(["show", "HEAD:./tool.yaml"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Manifest::from_yaml(&String::from_utf8_lossy(&out.stdout), "HEAD:tool.yaml").ok()
}

/// Versioning rules of `docs/plugin-authoring.md`: changelog section for the version, no
/// downgrade, no removal without an alias or replacement.
fn check_versioning(plugin_dir: &Path, now: &Manifest, before: Option<&Manifest>) -> Vec<Outcome> {
    let outcome = |name: &str, result: Result<String, String>| Outcome {
        skipped: false,
        file: "versioning".into(),
        name: name.to_owned(),
        passed: result.is_ok(),
        detail: match result {
            Ok(d) | Err(d) => d,
        },
    };
    let mut out = Vec::new();
    let changelog = plugin_dir.join("CHANGELOG.md");
    let version = now.version.to_string();
    let section = match fs::read_to_string(&changelog) {
        Err(_) => Err(format!(
            "no {}: create it with a `## {version}` section saying what this version changes",
            changelog.display()
        )),
        Ok(text) if changelog_versions(&text).contains(&version) => Ok(format!("`## {version}` found")),
        Ok(_) => Err(format!(
            "{} has no `## {version}` section: add one saying what changed{}",
            changelog.display(),
            before.filter(|b| b.version < now.version).map(|b| format!(" since {}", b.version)).unwrap_or_default()
        )),
    };
    out.push(outcome(&format!("CHANGELOG.md has version {version}"), section));
    let Some(before) = before else {
        out.push(outcome(
            "compared with the last commit",
            Ok("no committed tool.yaml (a new plugin): nothing to compare".into()),
        ));
        return out;
    };
    out.push(outcome(
        "the version does not go down",
        if now.version >= before.version {
            Ok(format!("{} -> {}", before.version, now.version))
        } else {
            Err(format!(
                "version {} is lower than the committed {}; hosts refuse downgrades: release a fix as a higher version",
                now.version, before.version
            ))
        },
    ));
    for old in &before.tools {
        if now.tool(&old.name).is_some() {
            continue;
        }
        let kept = now.tools.iter().find(|t| t.aliases.iter().any(|a| a.name == old.name));
        let replaced = old.lifecycle.replacement.as_ref().filter(|r| now.tool(r).is_some());
        out.push(outcome(
            &format!("removed tool `{}` stays reachable", old.name),
            match (kept, replaced) {
                (Some(t), _) => Ok(format!("alias of `{}`", t.name)),
                (None, Some(r)) => Ok(format!("replaced by `{r}`")),
                (None, None) => Err(format!(
                    "tool `{}` was removed without an alias or replacement: add `aliases: [{{name: {}, state: deprecated, first_deprecated_version: {}, planned_removal_version: <major>}}]` to the tool that replaces it, or keep it with `lifecycle: {{state: deprecated, replacement: <tool>}}`",
                    old.name, old.name, now.version
                )),
            },
        ));
    }
    out
}

/// A status as a fixture's `expect.status` writes it.
fn status_word(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Error => "error",
        Status::Partial => "partial",
    }
}

fn run_case(rt: &tokio::runtime::Runtime, router: &Router, case: &Case) -> Result<(), String> {
    let caller = Caller::new("contract-test", Access::unrestricted());
    let mut call = Call::new(&case.tool, case.arguments.clone(), caller).confirmed(true);
    call.config = case.config.clone().unwrap_or(Value::Null);
    let outcome = rt.block_on(router.call(call));
    let r = &outcome.response;
    let mut problems = Vec::new();
    if r.status != case.expect.status {
        let why = r.error.as_ref().map(|e| format!(" ({}: {})", e.code, e.message)).unwrap_or_default();
        problems.push(format!(
            "status: expected {}, got {}{why}",
            status_word(case.expect.status),
            status_word(r.status)
        ));
    }
    if let Some(code) = &case.expect.error_code {
        match &r.error {
            Some(e) if &e.code == code => {}
            Some(e) => problems.push(format!("error_code: expected {code}, got {} ({})", e.code, e.message)),
            None => problems.push(format!("error_code: expected {code}, got no error")),
        }
    }
    if let Some(outputs) = &case.expect.outputs
        && let Err(e) = check_subset(outputs, &r.outputs, "outputs")
    {
        problems.push(e);
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Every example of each visible tool of plugin `id` must find that tool among the first `k`
/// results of a search over the whole catalog.
fn check_examples(catalog: &Catalog, id: &str, k: usize) -> Vec<Outcome> {
    let access = Access::unrestricted();
    let n_tools = catalog.visible_tools().count();
    let mut out = Vec::new();
    for r in catalog.visible_tools().filter(|r| catalog.plugin_of(r).id() == id) {
        for example in &catalog.def(r).spec.examples {
            let req = SearchRequest { query: example.clone(), limit: Some(k), ..SearchRequest::default() };
            let (passed, detail) = match search_catalog(catalog, &access, &req, k) {
                Ok(res) => match res.tools.iter().position(|t| t.name == r.name) {
                    Some(rank) => (true, format!("rank {} of {n_tools} tools", rank + 1)),
                    None => {
                        let got: Vec<&str> = res.tools.iter().map(|t| t.name.as_str()).collect();
                        (
                            false,
                            format!(
                                "not in the top {k} of the whole catalog ({n_tools} tools; got: {}); reword the example or sharpen the tool's description and capabilities",
                                if got.is_empty() { "nothing".into() } else { got.join(", ") }
                            ),
                        )
                    }
                },
                Err(e) => (false, format!("search failed: {e}")),
            };
            out.push(Outcome {
                skipped: false,
                file: format!("examples:{}", r.name),
                name: example.clone(),
                passed,
                detail,
            });
        }
    }
    out
}

pub fn run(g: &GlobalArgs, a: &ContractTestArgs) -> Result<()> {
    let plugin_dir =
        fs::canonicalize(&a.plugin_dir).with_context(|| format!("no plugin folder {}", a.plugin_dir.display()))?;
    let temp = tempfile::Builder::new().prefix("quiver-contract-").tempdir()?;
    let fixture_dir = temp.path().join("fixtures");
    if plugin_dir.join("fixtures").is_dir() {
        copy_tree(&plugin_dir.join("fixtures"), &fixture_dir)?;
    }
    let fixture_dir_text = fixture_dir.display().to_string();
    let cases = read_cases(&fixture_dir)?;
    let source_path = plugin_dir.join("tool.yaml");
    let source = fs::read_to_string(&source_path).with_context(|| format!("cannot read {}", source_path.display()))?;
    let manifest = Manifest::from_yaml(&source, &source_path.display().to_string())?;

    // The configured host: its plugins folder is the catalog the plugin joins.
    let settings = Settings::load(g)?;
    let others = neighbours(&settings.host.plugins_dir, &manifest.id);
    let mut results = clashes(&manifest, &source_path, &others, &settings.origin());
    let host = load_bundle(
        &plugin_dir,
        a.library.as_deref(),
        temp.path(),
        &others,
        &settings.host.verify.trusted,
        IsolationPolicy::default(),
    )?;
    let catalog = host.catalog();
    results.push(Outcome {
        skipped: false,
        file: "load".into(),
        name: "the library implements the manifest's tools and actions".into(),
        passed: true,
        detail: format!(
            "{} tool(s); catalog of {} plugin(s) from {}",
            manifest.tools.len(),
            catalog.plugins().len(),
            settings.host.plugins_dir.display()
        ),
    });
    if a.load_only {
        return report(g, &plugin_dir, results);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let router = Router::new(host.clone(), RouterSettings::default());

    // The local HTTP test endpoint `cargo xtask contract-test` started for HTTP adapters.
    let endpoint = std::env::var("QUIVER_TEST_ENDPOINT").ok();
    let substitute_all = |mut case: Case, fixture_dir: &str| {
        for v in [Some(&mut case.arguments), case.config.as_mut(), case.expect.outputs.as_mut()].into_iter().flatten() {
            substitute_fixture_dir(v, fixture_dir);
            if let Some(url) = &endpoint {
                substitute(v, "${TEST_ENDPOINT}", url);
            }
        }
        case
    };
    let mut substituted = Vec::new();
    let mut in_process = Vec::new();
    for (file, case) in cases.iter().cloned() {
        let case = substitute_all(case, &fixture_dir_text);
        let outcome = run_case(&rt, &router, &case);
        substituted.push(case.clone());
        in_process.push(outcome.is_ok());
        results.push(Outcome {
            skipped: false,
            file,
            name: case.name.clone(),
            passed: outcome.is_ok(),
            detail: outcome.err().unwrap_or_default(),
        });
    }
    if results.is_empty() {
        results.push(Outcome {
            skipped: false,
            file: "fixtures/".into(),
            name: "at least one fixture case".into(),
            passed: false,
            detail: format!(
                "no cases in {}/fixtures/*.json; add some (see `cargo xtask new-tool`)",
                plugin_dir.display()
            ),
        });
    }
    results.extend(check_fixture_configs(&manifest, &substituted));
    results.extend(check_failure_paths(&rt, &router, &|_| Some(&router), &catalog, &manifest.id, &substituted));
    // Again in a sandboxed worker, against a fresh copy of the fixtures.
    let worker_dir = temp.path().join("worker");
    let worker_fixtures = worker_dir.join("fixtures");
    if plugin_dir.join("fixtures").is_dir() {
        copy_tree(&plugin_dir.join("fixtures"), &worker_fixtures)?;
    }
    let worker_text = worker_fixtures.display().to_string();
    let worker_cases: Vec<(String, Case)> =
        cases.into_iter().map(|(file, case)| (file, substitute_all(case, &worker_text))).collect();
    let pass = WorkerPass {
        plugin_dir: &plugin_dir,
        library: a.library.as_deref(),
        manifest: &manifest,
        dir: &worker_dir,
        trusted: &settings.host.verify.trusted,
        isolation: &settings.host.isolation,
    };
    results.extend(worker_pass(&rt, &pass, &worker_cases, &in_process));
    results.extend(check_examples(&catalog, &manifest.id, a.k));
    results.extend(check_versioning(&plugin_dir, &manifest, committed_manifest(&plugin_dir).as_ref()));
    report(g, &plugin_dir, results)
}

/// Replaces `from` by `to` in every string of `v`.
fn substitute(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(a) => a.iter_mut().for_each(|x| substitute(x, from, to)),
        Value::Object(m) => m.values_mut().for_each(|x| substitute(x, from, to)),
        _ => {}
    }
}

fn report(g: &GlobalArgs, plugin_dir: &Path, results: Vec<Outcome>) -> Result<()> {
    let n_failed = results.iter().filter(|r| !r.passed).count();
    let n_skipped = results.iter().filter(|r| r.passed && r.skipped).count();
    let n_passed = results.len() - n_failed - n_skipped;
    if g.json {
        let cases: Vec<Value> = results
            .iter()
            .map(|r| json!({"file": r.file, "case": r.name, "passed": r.passed, "skipped": r.skipped, "detail": r.detail}))
            .collect();
        println!(
            "{:#}",
            json!({"plugin": plugin_dir, "cases": cases, "n_passed": n_passed, "n_failed": n_failed, "n_skipped": n_skipped})
        );
    } else {
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                vec![
                    match (r.passed, r.skipped) {
                        (false, _) => "FAIL",
                        (true, true) => "SKIP",
                        (true, false) => "PASS",
                    }
                    .to_owned(),
                    r.file.clone(),
                    r.name.clone(),
                    r.detail.clone(),
                ]
            })
            .collect();
        print_table(&["RESULT", "FILE", "CASE", "DETAIL"], &rows);
        let skipped = if n_skipped > 0 { format!(", {n_skipped} skipped") } else { String::new() };
        println!("{n_passed} passed, {n_failed} failed{skipped}");
    }
    if n_failed > 0 { Err(Reported.into()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_matches_objects_recursively_and_arrays_whole() {
        let actual = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": null});
        assert!(check_subset(&json!({}), &actual, "outputs").is_ok());
        assert!(check_subset(&json!({"b": {"d": "x"}}), &actual, "outputs").is_ok());
        assert!(check_subset(&json!({"e": null}), &actual, "outputs").is_ok());
        assert_eq!(check_subset(&json!({"b": {"z": 1}}), &actual, "outputs").unwrap_err(), "outputs.b.z is missing");
        assert!(
            check_subset(&json!({"b": {"c": [1]}}), &actual, "outputs")
                .unwrap_err()
                .starts_with("outputs.b.c: expected [1]")
        );
        assert!(check_subset(&json!({"a": "1"}), &actual, "outputs").is_err());
    }

    #[test]
    fn statuses_are_named_as_fixtures_write_them() {
        assert_eq!(
            [Status::Ok, Status::Error, Status::Partial].map(status_word),
            ["ok", "error", "partial"],
            "a failed case says `expected ok, got error`, in the words of `expect.status`"
        );
    }

    #[test]
    fn fixture_dir_is_substituted_everywhere() {
        let mut v = json!({"root": "${FIXTURE_DIR}/root", "list": ["${FIXTURE_DIR}"], "n": 1});
        substitute_fixture_dir(&mut v, "/tmp/f");
        assert_eq!(v, json!({"root": "/tmp/f/root", "list": ["/tmp/f"], "n": 1}));
    }

    #[test]
    fn cases_read_as_one_object_or_an_array() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.json"), r#"{"name": "one", "tool": "t", "expect": {"status": "ok"}}"#).unwrap();
        fs::write(dir.path().join("b.json"), r#"[{"name": "two", "tool": "t", "arguments": {"x": 1}, "expect": {"status": "error", "error_code": "e"}}]"#).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a fixture").unwrap();
        let cases = read_cases(dir.path()).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].1.arguments, json!({}));
        assert_eq!(cases[1].1.expect.error_code.as_deref(), Some("e"));
        fs::write(dir.path().join("c.json"), r#"{"name": "bad", "tool": "t", "expect": {"status": "fine"}}"#).unwrap();
        assert!(read_cases(dir.path()).is_err());
    }
}

#[cfg(test)]
mod versioning_tests {
    use super::*;

    fn manifest(version: &str, tools: &[&str], extra: &str) -> Manifest {
        let mut y = format!(
            "manifest_version: 1\nid: demo\nversion: {version}\ndisplay_name: Demo\ndescription: A demo.\nabi: 1\ntools:\n"
        );
        for t in tools {
            y.push_str(&format!(
                "  - name: {t}\n    title: T\n    description: Does {t}.\n    domain: text\n    side_effects: read\n    scopes: [text.read]\n"
            ));
            if *t == "demo_new" {
                y.push_str(extra);
            }
        }
        Manifest::from_yaml(&y, "tool.yaml").unwrap()
    }

    fn failed(outcomes: &[Outcome]) -> Vec<String> {
        outcomes.iter().filter(|o| !o.passed).map(|o| o.detail.clone()).collect()
    }

    #[test]
    fn changelog_sections_are_read_in_the_usual_spellings() {
        let text = "# Changelog\n\n## [1.2.0] - 2026-01-01\n- x\n## v1.1.0\n## 1.0.0\n### 0.9.0\n## Unreleased\n";
        assert_eq!(changelog_versions(text), ["1.2.0", "1.1.0", "1.0.0"]);
    }

    #[test]
    fn fixture_configs_must_fit_the_config_schema() {
        let case = |name: &str, config: Option<Value>| -> Case {
            let mut c: Case =
                serde_json::from_value(json!({"name": name, "tool": "demo_a", "expect": {"status": "ok"}})).unwrap();
            c.config = config;
            c
        };
        let cases = vec![case("fits", Some(json!({"root": "/x"}))), case("none", None)];
        // No schema: no check.
        assert!(check_fixture_configs(&manifest("0.1.0", &["demo_a"], ""), &cases).is_none());
        let schema = "config_schema: {type: object, additionalProperties: false, properties: {root: {type: string}}}\n";
        let with = Manifest::from_yaml(
            &serde_yaml::to_string(&manifest("0.1.0", &["demo_a"], ""))
                .unwrap()
                .replace("tools:\n", &format!("{schema}tools:\n")),
            "tool.yaml",
        )
        .unwrap();
        let ok = check_fixture_configs(&with, &cases).unwrap();
        assert!(ok.passed && ok.detail == "1 case(s) with a config", "{}", ok.detail);
        let mut bad = cases.clone();
        bad.push(case("typo", Some(json!({"rot": "/x"}))));
        let failed = check_fixture_configs(&with, &bad).unwrap();
        assert!(!failed.passed, "{}", failed.detail);
        assert!(
            failed.detail.contains("case `typo`") && failed.detail.contains("plugin_config.demo.rot"),
            "{}",
            failed.detail
        );
    }

    #[test]
    fn a_case_failing_only_in_the_worker_is_told_the_sandbox_field_to_declare() {
        let with_sandbox = |sandbox: &str| {
            let y = serde_yaml::to_string(&manifest("0.1.0", &["demo_a"], "")).unwrap();
            let y = y.replace("tools:\n", &format!("{sandbox}tools:\n"));
            let mut m = Manifest::from_yaml(&y, "tool.yaml").unwrap();
            m.tools[0].side_effects = SideEffects::Write;
            m
        };
        let root = tempfile::tempdir().unwrap();
        let config = json!({"root": root.path().display().to_string(), "mode": "fast"});
        // No grant names `root`: declare one, with write access for a tool that writes.
        let none = sandbox_fix(&with_sandbox(""), Some("demo_a"), Some(&config), root.path());
        assert!(
            none.starts_with("tool `demo_a` likely opens")
                && none.contains("(granted: no path)")
                && none.contains("under `sandbox.filesystem` in tool.yaml: `- {config: root, access: read_write}`"),
            "{none}"
        );
        // A read grant for a tool that writes: the access field.
        let read = with_sandbox("sandbox:\n  filesystem:\n    - {config: root, access: read}\n");
        let narrow = sandbox_fix(&read, Some("demo_a"), Some(&config), root.path());
        let granted = fs::canonicalize(root.path()).unwrap().display().to_string();
        assert!(
            narrow.contains(&format!("(granted: {granted} (read))"))
                && narrow.contains("`config: root` under `sandbox.filesystem` in tool.yaml has `access: read`")
                && narrow.contains("set `access: read_write`"),
            "{narrow}"
        );
        // Granted as it needs: what else a worker refuses (other paths, the network).
        let full = with_sandbox("sandbox:\n  filesystem:\n    - {config: root, access: read_write}\n");
        let other = sandbox_fix(&full, Some("demo_a"), Some(&config), root.path());
        assert!(
            other.contains("`path: /absolute` for a fixed one") && other.contains("`sandbox.network: true` to use TCP"),
            "{other}"
        );
    }

    #[test]
    fn a_version_bump_needs_a_changelog_section() {
        let dir = tempfile::tempdir().unwrap();
        let before = manifest("0.1.0", &["demo_a"], "");
        let now = manifest("0.2.0", &["demo_a"], "");
        // No changelog at all.
        let f = failed(&check_versioning(dir.path(), &now, Some(&before)));
        assert!(f.len() == 1 && f[0].contains("no ") && f[0].contains("## 0.2.0"), "{f:?}");
        // A changelog without the new version.
        fs::write(dir.path().join("CHANGELOG.md"), "## 0.1.0\n- first\n").unwrap();
        let f = failed(&check_versioning(dir.path(), &now, Some(&before)));
        assert!(f.len() == 1 && f[0].contains("no `## 0.2.0` section") && f[0].contains("since 0.1.0"), "{f:?}");
        fs::write(dir.path().join("CHANGELOG.md"), "## 0.2.0\n- more\n\n## 0.1.0\n- first\n").unwrap();
        assert!(failed(&check_versioning(dir.path(), &now, Some(&before))).is_empty());
        // A downgrade is refused even with a changelog section.
        fs::write(dir.path().join("CHANGELOG.md"), "## 0.0.9\n").unwrap();
        let f = failed(&check_versioning(dir.path(), &manifest("0.0.9", &["demo_a"], ""), Some(&before)));
        assert!(f.iter().any(|d| d.contains("lower than the committed 0.1.0")), "{f:?}");
        // A new plugin has nothing to compare with, but still needs its section.
        fs::write(dir.path().join("CHANGELOG.md"), "## 0.1.0\n").unwrap();
        assert!(failed(&check_versioning(dir.path(), &before, None)).is_empty());
    }

    #[test]
    fn a_removed_tool_needs_an_alias_or_a_replacement() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("CHANGELOG.md"), "## 1.0.0\n").unwrap();
        let before = manifest("0.1.0", &["demo_a", "demo_old"], "");
        let f = failed(&check_versioning(dir.path(), &manifest("1.0.0", &["demo_a"], ""), Some(&before)));
        assert!(f.len() == 1 && f[0].contains("`demo_old` was removed without an alias or replacement"), "{f:?}");
        // Renamed, with the old name kept as an alias.
        let alias = "    aliases:\n      - {name: demo_old, state: deprecated, first_deprecated_version: 1.0.0, planned_removal_version: 2.0.0}\n";
        let now = manifest("1.0.0", &["demo_a", "demo_new"], alias);
        assert!(failed(&check_versioning(dir.path(), &now, Some(&before))).is_empty());
    }

    #[test]
    fn clashing_names_are_reported_with_the_fix() {
        let mine = manifest("0.1.0", &["demo_a", "fs_read"], "");
        let mut theirs = manifest("0.2.0", &["fs_read"], "");
        theirs.id = "fs-tools".into();
        let others =
            [Neighbour { manifest: theirs, manifest_path: PathBuf::from("plugins/fs-tools/fs-tools.tool.yaml") }];
        let found = clashes(&mine, Path::new("plugins/demo/tool.yaml"), &others, "quiver.yaml");
        assert_eq!(found.len(), 1);
        let d = &found[0].detail;
        assert!(
            d.contains("tool `fs_read` of `demo` clashes with tool `fs_read` of `fs-tools`")
                && d.contains("rename it in plugins/demo/tool.yaml")
                && d.contains("name_conflicts: namespace"),
            "{d}"
        );
        assert!(clashes(&manifest("0.1.0", &["demo_a"], ""), Path::new("t"), &others, "q").is_empty());
    }
}

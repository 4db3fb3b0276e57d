//! A loaded plugin as the catalog sees it: its signed manifest, its tools with their schemas
//! compiled once, and the backend that runs them.

use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use quiver_abi::PluginInfo;
use quiver_manifest::{Manifest, Policies, SideEffects, ToolSpec};
use serde_json::Value;

use crate::ToolBackend;
use crate::shape::Shape;

/// Where a plugin came from and who vouched for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// sha256 of the library bytes that were loaded.
    pub sha256: String,
    /// Key id of the minisign key that signed the manifest; `None` for an unsigned development load.
    pub signer_key_id: Option<String>,
    /// The manifest file the bundle was read from.
    pub manifest_path: String,
}

/// One loaded plugin. Built once per load (schemas compiled here, never on the call path) and
/// shared by every catalog snapshot that contains it, so in-flight calls keep it alive across swaps.
pub struct PluginEntry {
    /// The signed manifest.
    pub manifest: Manifest,
    /// Provenance of the bundle.
    pub provenance: Provenance,
    /// The tools, in manifest order.
    pub tools: Vec<ToolDef>,
    /// Runs the plugin's calls.
    pub backend: Arc<dyn ToolBackend>,
    /// What the library said about itself (its embedded manifest and derived schemas).
    pub info: Arc<PluginInfo>,
    /// Where the tools come from, for operators (`quiver list`, `surface`, `search`, `verify`):
    /// `plugin` (a native library; what [`PluginEntry::new`] sets), `adapter:command`,
    /// `adapter:http`, `upstream:NAME`. Set it after `new` for other sources.
    pub source: String,
}

impl std::fmt::Debug for PluginEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEntry")
            .field("id", &self.manifest.id)
            .field("version", &self.manifest.version.to_string())
            .field("sha256", &self.provenance.sha256)
            .finish_non_exhaustive()
    }
}

/// One tool of a loaded plugin, ready to be validated against and called.
pub struct ToolDef {
    /// The manifest entry.
    pub spec: ToolSpec,
    /// The effective input schema (manifest override, else derived from the Rust type).
    pub input_schema: Arc<Value>,
    /// The effective output schema, if any.
    pub output_schema: Option<Arc<Value>>,
    /// Input validator (see [`ToolValidator`] for when it is compiled).
    pub input_validator: ToolValidator,
    /// Output validator, when the tool has an output schema.
    pub output_validator: Option<ToolValidator>,
    /// Policies with defaults applied.
    pub policies: Policies,
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef").field("name", &self.spec.name).finish_non_exhaustive()
    }
}

impl ToolDef {
    /// Its input schema's shape ([`ToolValidator::shape`]), made on first use.
    #[inline]
    pub fn input_shape(&self) -> Option<&Shape> {
        self.input_validator.shape()
    }

    /// Its output schema's shape, made on first use.
    #[inline]
    pub fn output_shape(&self) -> Option<&Shape> {
        self.output_validator.as_ref().and_then(ToolValidator::shape)
    }

    /// Risk of a call: the action's risk when the tool has actions and one is named, else the tool's.
    pub fn side_effects_for(&self, action: Option<&str>) -> SideEffects {
        action
            .and_then(|a| self.spec.actions.iter().find(|x| x.name == a))
            .map(|a| a.side_effects)
            .unwrap_or(self.spec.side_effects)
    }

    /// Whether a call needs confirmation: the action's override, else the tool's policy.
    pub fn needs_confirmation(&self, action: Option<&str>) -> bool {
        action
            .and_then(|a| self.spec.actions.iter().find(|x| x.name == a))
            .and_then(|a| a.confirmation)
            .unwrap_or(self.policies.confirmation)
    }

    /// Scopes a call needs: the tool's plus the action's.
    pub fn scopes_for<'a>(&'a self, action: Option<&str>) -> impl Iterator<Item = &'a str> + 'a {
        let extra = action
            .and_then(|a| self.spec.actions.iter().find(|x| x.name == a))
            .map(|a| a.scopes.as_slice())
            .unwrap_or(&[]);
        self.spec.scopes.iter().chain(extra.iter()).map(String::as_str)
    }
}

/// Why a plugin could not become a [`PluginEntry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryError {
    /// Plugin id.
    pub plugin: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for EntryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "plugin `{}`: {}", self.plugin, self.message)
    }
}

impl std::error::Error for EntryError {}

/// Compiles a JSON Schema (draft 2020-12, no remote references).
pub fn compile_schema(schema: &Value) -> Result<Validator, String> {
    jsonschema::options().with_draft(jsonschema::Draft::Draft202012).build(schema).map_err(|e| e.to_string())
}

/// A tool's schema validator, compiled once. [`PluginEntry::new`] compiles it while building the
/// entry (a schema that does not compile refuses the plugin, by name, at load), unless the
/// schema is known to compile ([`crate::shape::Shape::known_to_compile`]): then, as below, on
/// first use.
/// [`PluginEntry::new_compiled_on_use`] leaves it to the first call that needs it: for a plugin
/// listed from the load report of an earlier load of exactly these bytes by this host build,
/// whose schemas compiled then (a start then pays only for the tools it calls).
pub struct ToolValidator {
    schema: Arc<Value>,
    compiled: OnceLock<Result<Arc<Validator>, String>>,
    /// The schema's [`Shape`], when it has one: made once, by the load's
    /// [`ToolValidator::known_to_compile`] or the first call that checks a value or text.
    shape: OnceLock<Option<Shape>>,
}

impl ToolValidator {
    /// A validator compiled already, for `schema`.
    pub fn ready(validator: Arc<Validator>, schema: Arc<Value>) -> ToolValidator {
        ToolValidator { schema, compiled: OnceLock::from(Ok(validator)), shape: OnceLock::new() }
    }

    /// Compiles `schema` now.
    pub fn compile(schema: Arc<Value>) -> Result<ToolValidator, String> {
        let validator = compile_schema(&schema)?;
        Ok(ToolValidator::ready(Arc::new(validator), schema))
    }

    /// A validator for `schema` compiled on its first [`ToolValidator::get`].
    pub fn on_use(schema: Arc<Value>) -> ToolValidator {
        ToolValidator { schema, compiled: OnceLock::new(), shape: OnceLock::new() }
    }

    /// The compiled validator (compiled now if this is its first use), or why the schema does
    /// not compile.
    pub fn get(&self) -> Result<&Validator, &str> {
        match self.compiled.get_or_init(|| compile_schema(&self.schema).map(Arc::new)) {
            Ok(v) => Ok(v),
            Err(e) => Err(e),
        }
    }

    /// Whether it has been compiled (or tried).
    pub fn is_compiled(&self) -> bool {
        self.compiled.get().is_some()
    }

    /// The shape of the schema it validates ([`Shape::of`]), made on first use: the router's
    /// check of arguments and outputs without `jsonschema`.
    #[inline]
    pub fn shape(&self) -> Option<&Shape> {
        self.shape.get_or_init(|| Shape::of(&self.schema)).as_ref()
    }

    /// [`Shape::known_to_compile`] for its schema, with the shape kept for [`ToolValidator::shape`].
    fn known_to_compile(&self) -> bool {
        self.shape().is_some() && Shape::compiles_given_its_shape(&self.schema)
    }
}

impl PluginEntry {
    /// Builds the entry: checks that the plugin implements exactly the manifest's tools, picks
    /// each effective schema and compiles it, so a schema that does not compile refuses the
    /// plugin by name here; a schema known to compile without trying
    /// ([`crate::shape::Shape::known_to_compile`]) is compiled by its first use instead.
    pub fn new(
        manifest: Manifest,
        info: &PluginInfo,
        provenance: Provenance,
        backend: Arc<dyn ToolBackend>,
    ) -> Result<PluginEntry, EntryError> {
        PluginEntry::build(manifest, info, provenance, backend, true)
    }

    /// Like [`PluginEntry::new`], but each schema is compiled on its first use, not now: only
    /// for a plugin whose exact manifest and self-description this host build already built an
    /// entry from (a kept load report with its recorded check), so the schemas are known to
    /// compile. Every other check runs as in `new`.
    pub fn new_compiled_on_use(
        manifest: Manifest,
        info: &PluginInfo,
        provenance: Provenance,
        backend: Arc<dyn ToolBackend>,
    ) -> Result<PluginEntry, EntryError> {
        PluginEntry::build(manifest, info, provenance, backend, false)
    }

    fn build(
        manifest: Manifest,
        info: &PluginInfo,
        provenance: Provenance,
        backend: Arc<dyn ToolBackend>,
        compile_now: bool,
    ) -> Result<PluginEntry, EntryError> {
        let err = |message: String| EntryError { plugin: manifest.id.clone(), message };
        for t in &info.tools {
            if manifest.tool(&t.name).is_none() {
                return Err(err(format!(
                    "the library implements tool `{}` which its manifest does not declare; add it to tool.yaml or remove it from export_plugin!",
                    t.name
                )));
            }
        }
        let mut tools = Vec::with_capacity(manifest.tools.len());
        for spec in &manifest.tools {
            let derived = info.tools.iter().find(|t| t.name == spec.name).ok_or_else(|| {
                err(format!(
                    "tool `{}` is declared in the manifest but the library does not implement it; add it to export_plugin! or remove it from tool.yaml",
                    spec.name
                ))
            })?;
            crate::actions::check_tool_actions(spec, derived).map_err(err)?;
            let input_schema = spec.input_schema.clone().unwrap_or_else(|| derived.input_schema.clone());
            let output_schema = spec.output_schema.clone().or_else(|| Some(derived.output_schema.clone()));
            let input_schema = Arc::new(input_schema);
            let output_schema = output_schema.map(Arc::new);
            let validator = |schema: &Arc<Value>, which: &str| {
                let v = ToolValidator::on_use(schema.clone());
                if compile_now && !v.known_to_compile() {
                    v.get().map_err(|e| err(format!("tool `{}`: {which} schema does not compile: {e}", spec.name)))?;
                }
                Ok(v)
            };
            let input_validator = validator(&input_schema, "input")?;
            let output_validator = output_schema.as_ref().map(|s| validator(s, "output")).transpose()?;
            tools.push(ToolDef {
                policies: spec.policies.effective(spec.side_effects),
                spec: spec.clone(),
                input_schema,
                output_schema,
                input_validator,
                output_validator,
            });
        }
        Ok(PluginEntry {
            manifest,
            provenance,
            tools,
            backend,
            info: Arc::new(info.clone()),
            source: "plugin".to_owned(),
        })
    }

    /// Plugin id.
    pub fn id(&self) -> &str {
        &self.manifest.id
    }
}

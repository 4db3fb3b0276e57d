//! What a session sees: exposure modes, caps, byte budgets, and byte-stable serialization.
//!
//! A surface is built in partitions, each in a fixed order, so that its serialization is
//! deterministic and append-friendly for prompt caching:
//! 1. **head**: the profile's eager tools and the `active` tools the session may see, sorted by
//!    name; identical for every mode that shares the profile's head;
//! 2. **meta**: the mode's meta tools (`tool_search`; `list_tools` + `run_tool`), fixed order;
//! 3. **loaded**: tools loaded into the session by `tool_search`, in load order;
//! 4. **called**: (adaptive, hybrid) tools the session called by a name not on its surface
//!    (through `run_tool` or a compatibility alias), in call order: a call is the clearest intent;
//! 5. **intent**: (adaptive, hybrid) deferred tools picked for the session's recent intent,
//!    sorted by name.
//!
//! Which tools make the head depends on the mode: `lazy` shows only the profile's `eager` tools
//! (nothing is pinned by the catalog, so installing a plugin never changes a lazy surface);
//! `adaptive` and `hybrid` add the tools whose manifests declare them `active`, within a share
//! of the caps.
//!
//! Caps: at most `max_typed_tools` typed schemas plus the meta tools, and at most `byte_budget`
//! bytes of serialized typed descriptors; a tool that does not fit is left out (and reported).
//! Mode `full` shows every visible tool and applies no caps (its counts are still reported).

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::meta_args::{list_tools_schema, run_tool_schema, tool_search_schema};
use crate::{Access, Catalog, ToolRef};

/// How much of the catalog a session sees up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExposureMode {
    /// Every visible tool.
    Full,
    /// Core plus a typed subset picked per turn by intent.
    Adaptive,
    /// Adaptive plus the generic lane (`list_tools`, `run_tool`).
    #[default]
    Hybrid,
    /// The eager set plus `tool_search`, which loads matches into the session.
    Lazy,
}

impl From<quiver_manifest::ExposureMode> for ExposureMode {
    fn from(m: quiver_manifest::ExposureMode) -> ExposureMode {
        match m {
            quiver_manifest::ExposureMode::Full => ExposureMode::Full,
            quiver_manifest::ExposureMode::Adaptive => ExposureMode::Adaptive,
            quiver_manifest::ExposureMode::Hybrid => ExposureMode::Hybrid,
            quiver_manifest::ExposureMode::Lazy => ExposureMode::Lazy,
        }
    }
}

impl From<&quiver_manifest::Profile> for SurfacePolicy {
    fn from(p: &quiver_manifest::Profile) -> SurfacePolicy {
        SurfacePolicy {
            mode: p.mode.into(),
            eager: p.eager.clone(),
            max_typed_tools: p.max_typed_tools as usize,
            byte_budget: usize::try_from(p.byte_budget).unwrap_or(usize::MAX),
        }
    }
}

impl ExposureMode {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExposureMode::Full => "full",
            ExposureMode::Adaptive => "adaptive",
            ExposureMode::Hybrid => "hybrid",
            ExposureMode::Lazy => "lazy",
        }
    }
    /// The meta tools this mode adds, in their fixed order.
    pub fn meta_tools(self) -> &'static [&'static str] {
        match self {
            ExposureMode::Full => &[],
            ExposureMode::Adaptive => &[TOOL_SEARCH],
            ExposureMode::Hybrid => &[TOOL_SEARCH, LIST_TOOLS, RUN_TOOL],
            ExposureMode::Lazy => &[TOOL_SEARCH],
        }
    }
    /// True when tools are picked by the session's intent (its searches and calls).
    pub fn uses_intent(self) -> bool {
        matches!(self, ExposureMode::Adaptive | ExposureMode::Hybrid)
    }
    /// True when the head includes the catalog's `active` tools besides the profile's eager
    /// ones (lazy shows only what the profile names).
    pub fn pins_active(self) -> bool {
        matches!(self, ExposureMode::Adaptive | ExposureMode::Hybrid)
    }
}

/// Names the router must never dispatch through `run_tool`, and that no plugin or upstream tool
/// may take ([`quiver_manifest::RESERVED_TOOL_NAMES`]).
pub const META_TOOLS: [&str; 3] = quiver_manifest::RESERVED_TOOL_NAMES;
/// Name of the search meta tool.
pub const TOOL_SEARCH: &str = META_TOOLS[0];
/// Name of the generic listing tool.
pub const LIST_TOOLS: &str = META_TOOLS[1];
/// Name of the generic dispatch tool.
pub const RUN_TOOL: &str = META_TOOLS[2];

/// Per-profile surface settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfacePolicy {
    /// Exposure mode.
    pub mode: ExposureMode,
    /// Tool names always in the head (the core), in the profile's order.
    pub eager: Vec<String>,
    /// Typed schemas per turn, meta tools not counted.
    pub max_typed_tools: usize,
    /// Bytes of serialized typed descriptors per turn.
    pub byte_budget: usize,
}

impl SurfacePolicy {
    /// Default cap on typed schemas.
    pub const DEFAULT_MAX_TYPED: usize = 16;
    /// Default byte budget.
    pub const DEFAULT_BYTE_BUDGET: usize = 12 * 1024;
}

impl Default for SurfacePolicy {
    fn default() -> Self {
        SurfacePolicy {
            mode: ExposureMode::Hybrid,
            eager: Vec::new(),
            max_typed_tools: Self::DEFAULT_MAX_TYPED,
            byte_budget: Self::DEFAULT_BYTE_BUDGET,
        }
    }
}

/// Which partition a surface entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Partition {
    /// Eager and active tools.
    Head,
    /// Meta tools of the mode.
    Meta,
    /// Loaded by search.
    Loaded,
    /// Called by a name not on the surface (adaptive, hybrid).
    Called,
    /// Picked by intent.
    Intent,
}

/// One tool on a surface.
#[derive(Debug, Clone)]
pub struct SurfaceEntry {
    /// Exposed name.
    pub name: String,
    /// Partition.
    pub partition: Partition,
    /// The serialized descriptor (MCP `Tool` shape without `_meta`).
    pub descriptor: Arc<Value>,
    /// Its serialized size in bytes.
    pub bytes: usize,
}

/// What one session sees on one turn, with the figures telemetry reports.
#[derive(Debug, Clone, Default)]
pub struct Surface {
    /// Entries in serialization order.
    pub entries: Vec<SurfaceEntry>,
    /// Typed (non-meta) tools shown.
    pub n_typed: usize,
    /// Meta tools shown.
    pub n_meta: usize,
    /// Bytes of serialized typed descriptors.
    pub typed_bytes: usize,
    /// Bytes of the whole serialized surface ([`Surface::to_bytes`]).
    pub total_bytes: usize,
    /// Tools that qualified but were left out by the caps, in priority order.
    pub dropped: Vec<String>,
    /// Eager names the profile lists that are not visible tools (ignored).
    pub ignored_eager: Vec<String>,
}

impl Surface {
    /// The byte-stable serialization: a JSON array of descriptors, in entry order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.total_bytes.max(2));
        out.push(b'[');
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Serializing a `Value` cannot fail.
            out.extend(serde_json::to_vec(e.descriptor.as_ref()).unwrap_or_default());
        }
        out.push(b']');
        out
    }

    /// True when `name` is on the surface.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|e| e.name == name)
    }

    /// Names in order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }
}

/// Formats JSON Schema 2020-12 defines; any other `format` (schemars' `uint64`, `int32`,
/// `double`, ...) makes strict validators (Ajv in the TypeScript SDK) warn on every listing.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Removes a non-standard `format` from one schema object. An unsigned integer format
/// (`uint`, `uint8` ... `uint64`) becomes `minimum: 0` when no minimum is given, so nothing
/// the format said is lost.
pub(crate) fn strip_nonstandard_format(m: &mut serde_json::Map<String, Value>) {
    let Some(Value::String(f)) = m.get("format") else { return };
    if STANDARD_FORMATS.contains(&f.as_str()) {
        return;
    }
    let unsigned = f.starts_with("uint");
    m.remove("format");
    if unsigned && !m.contains_key("minimum") && !m.contains_key("exclusiveMinimum") {
        m.insert("minimum".into(), json!(0));
    }
}

/// The dialect MCP assumes for a schema without `$schema`: saying it again is redundant.
const DEFAULT_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Joins the line breaks a doc comment leaves inside a paragraph (`a\nb` becomes `a b`);
/// paragraph breaks (an empty line) stay. Trims the ends.
pub(crate) fn unwrap_lines(text: &str) -> String {
    if !text.contains('\n') {
        return text.trim().to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for (i, para) in text.split("\n\n").enumerate() {
        let joined: Vec<&str> = para.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        if joined.is_empty() {
            continue;
        }
        if i > 0 && !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&joined.join(" "));
    }
    out
}

/// Calls `f` on every object of a schema, depth first from the root, with whether the object
/// is a map of named subschemas (`properties`, `$defs`, ...), whose keys are names, not keywords.
fn walk_schema(v: &mut Value, in_properties: bool, f: &mut impl FnMut(&mut Map<String, Value>, bool)) {
    match v {
        Value::Object(m) => {
            f(m, in_properties);
            for (k, c) in m.iter_mut() {
                let named = !in_properties
                    && matches!(k.as_str(), "properties" | "$defs" | "definitions" | "patternProperties");
                walk_schema(c, named, f);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| walk_schema(c, false, f)),
        _ => {}
    }
}

/// A schema as advertised: what a validator enforces is unchanged, what only costs tokens is
/// gone. Everywhere (`properties`, `items`, `$defs`, ...; a property *named* like a keyword is
/// left alone): non-standard formats removed, doc-comment line breaks joined in descriptions,
/// `title`s dropped where a `description` says more (and at the root: the tool has its own),
/// `"default": null` dropped (an absent optional value is null anyway), and `$schema` dropped
/// when it names the dialect MCP assumes. At the root, the schema's own description ("Arguments
/// of `x`", "Result of `x`") is dropped: the tool's description says what the tool does.
pub(crate) fn advertised(mut schema: Value) -> Value {
    fn compact(m: &mut Map<String, Value>, in_properties: bool) {
        if !in_properties {
            strip_nonstandard_format(m);
            if m.get("$schema").and_then(Value::as_str).is_some_and(|d| d.trim_end_matches('#') == DEFAULT_DIALECT) {
                m.remove("$schema");
            }
            if matches!(m.get("default"), Some(Value::Null)) {
                m.remove("default");
            }
            if m.get("description").is_some_and(Value::is_string) && m.get("title").is_some_and(Value::is_string) {
                m.remove("title");
            }
            if let Some(Value::String(d)) = m.get_mut("description")
                && d.contains('\n')
            {
                *d = unwrap_lines(d);
            }
        }
    }
    if let Value::Object(m) = &mut schema {
        m.remove("title");
        m.remove("description");
    }
    walk_schema(&mut schema, false, &mut compact);
    schema
}

/// An output schema as advertised: [`advertised`], and without descriptions. Its structure
/// (types, required fields, enums) is all a client needs to check `structuredContent`, and the
/// model reads the result itself; the described output schema is in the tool's documentation
/// (the `quiver://tools/<name>` resource) and `quiver list`. This halves what output schemas
/// cost on every turn.
pub(crate) fn advertised_output(schema: Value) -> Value {
    fn undescribe(m: &mut Map<String, Value>, in_properties: bool) {
        if !in_properties && m.get("description").is_some_and(Value::is_string) {
            m.remove("description");
        }
    }
    let mut schema = advertised(schema);
    walk_schema(&mut schema, false, &mut undescribe);
    schema
}

/// A `$schema` the author wrote at the root of a manifest schema is advertised as written (MCP
/// clients must see the dialect a schema declares, SEP-1613); only the one `schemars` adds to a
/// schema derived from Rust types is dropped as redundant.
fn keep_dialect(mut advertised: Value, written: Option<&Value>) -> Value {
    if let (Some(dialect), Value::Object(m)) = (written.and_then(|w| w.get("$schema")), &mut advertised) {
        m.insert("$schema".into(), dialect.clone());
    }
    advertised
}

/// Builds the MCP-shaped descriptor of a tool (no `_meta`: provenance is added by the server
/// and is not part of what the budget counts).
pub(crate) fn descriptor(catalog: &Catalog, r: &ToolRef) -> Value {
    let def = catalog.def(r);
    let s = &def.spec;
    let mut d = serde_json::Map::new();
    d.insert("name".into(), Value::String(r.name.clone()));
    d.insert("title".into(), Value::String(s.title.clone()));
    d.insert("description".into(), Value::String(unwrap_lines(&s.description)));
    d.insert("inputSchema".into(), keep_dialect(advertised((*def.input_schema).clone()), s.input_schema.as_ref()));
    if let Some(o) = &def.output_schema {
        d.insert("outputSchema".into(), keep_dialect(advertised_output((**o).clone()), s.output_schema.as_ref()));
    }
    d.insert("annotations".into(), annotations(s.side_effects, s.idempotent));
    Value::Object(d)
}

/// MCP tool annotations. `destructiveHint` and `idempotentHint` mean something only for tools
/// that are not read-only (the MCP specification says so), so read-only tools carry just
/// `readOnlyHint` and `openWorldHint` (whose default, true, would be wrong for most tools).
pub(crate) fn annotations(se: quiver_manifest::SideEffects, idempotent: bool) -> Value {
    if !se.mutates() {
        return json!({"readOnlyHint": true, "openWorldHint": se == quiver_manifest::SideEffects::External});
    }
    json!({
        "readOnlyHint": false,
        "destructiveHint": se == quiver_manifest::SideEffects::Destructive,
        "idempotentHint": idempotent,
        "openWorldHint": se == quiver_manifest::SideEffects::External,
    })
}

/// Descriptors of the meta tools. `tool_search`'s description carries a compact index of what
/// can be found (domains with counts, a few names), bounded to `index_budget` bytes.
pub(crate) fn meta_descriptor(name: &str, catalog: &Catalog, access: &Access, index_budget: usize) -> Value {
    match name {
        TOOL_SEARCH => {
            let index = catalog.domain_index(access, index_budget);
            json!({
                "name": TOOL_SEARCH,
                "title": "Find tools",
                "description": format!(
                    "Search the tool catalog by what you want to do, and load the best matches so you can call them directly. Returns compact entries (name, summary, required arguments, whether it changes anything). Use before giving up on a task that needs a tool you do not see. {index}"
                ),
                "inputSchema": advertised(tool_search_schema().schema.as_ref().clone()),
                "annotations": {"readOnlyHint": true, "openWorldHint": false}
            })
        }
        LIST_TOOLS => json!({
            "name": LIST_TOOLS,
            "title": "List callable tools",
            "description": "List every tool you can call through run_tool, including ones not in your tool list, optionally filtered by a search query or domain. Returns compact entries; ask for detail=full to get input schemas.",
            "inputSchema": advertised(list_tools_schema().schema.as_ref().clone()),
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        _ => json!({
            "name": RUN_TOOL,
            "title": "Run any tool",
            "description": "Call any tool by name, including tools not in your tool list (find them with list_tools or tool_search). The same checks apply as for a direct call: scopes, confirmation, argument validation.",
            "inputSchema": advertised(run_tool_schema().schema.as_ref().clone()),
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true}
        }),
    }
}

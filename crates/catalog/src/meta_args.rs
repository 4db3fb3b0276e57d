//! The meta tools' arguments as Rust types. Their advertised input schemas are derived from these
//! types (schemars) and compiled once with the same validator as plugin schemas, so what the
//! schema says, the meta tools enforce: a missing `query`, a `limit` out of range, an unknown
//! `detail` or an unadvertised filter is refused, never clamped or ignored.

use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use quiver_abi::schemars::{self, JsonSchema};
use serde::Deserialize;
use serde_json::Value;

use crate::entry::compile_schema;
use crate::search::Query;
use crate::session::SearchRequest;

/// How `query` is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars", inline)]
pub enum QueryMode {
    // Plain words, ranked. (Plain comments: doc comments would turn the schema's `enum` into
    // a longer `oneOf`.)
    #[default]
    Text,
    // A regular expression over names and descriptions.
    Regex,
}

/// How much each entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars", inline)]
pub enum Detail {
    // Name, summary, required arguments, whether it changes anything.
    #[default]
    Compact,
    // Also each tool's input schema.
    Full,
}

fn search_limit() -> u32 {
    5
}
fn list_limit() -> u32 {
    20
}
fn yes() -> bool {
    true
}

/// `tool_search` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ToolSearchArgs {
    /// What you want to do, in plain words, or a regex when mode is regex.
    pub query: String,
    /// How query is read.
    #[serde(default)]
    pub mode: QueryMode,
    /// Only tools of this domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// true: only tools that change something; false: only read-only tools.
    #[serde(default)]
    pub mutating: Option<bool>,
    /// Matches to return.
    #[serde(default = "search_limit")]
    #[schemars(range(min = 1, max = 50))]
    pub limit: u32,
    /// Matches to skip (paging).
    #[serde(default)]
    pub offset: u32,
    /// full adds each tool's input schema.
    #[serde(default)]
    pub detail: Detail,
    /// Load the matches into this session's tool list.
    #[serde(default = "yes")]
    pub load: bool,
    /// Tool names to drop from this session's tool list when you no longer need them (with
    /// query "" nothing else happens).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unload: Vec<String>,
}

/// `list_tools` arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ListToolsArgs {
    /// Optional words to rank by.
    #[serde(default)]
    pub query: Option<String>,
    /// Only tools of this domain.
    #[serde(default)]
    pub domain: Option<String>,
    /// true: only tools that change something; false: only read-only tools.
    #[serde(default)]
    pub mutating: Option<bool>,
    /// Entries per page.
    #[serde(default = "list_limit")]
    #[schemars(range(min = 1, max = 50))]
    pub limit: u32,
    /// Entries to skip (paging).
    #[serde(default)]
    pub offset: u32,
    /// full adds each tool's input schema.
    #[serde(default)]
    pub detail: Detail,
}

/// `run_tool` arguments (the router reads them; this type gives the advertised schema).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct RunToolArgs {
    /// The tool's name.
    pub name: String,
    /// The tool's arguments, as its input schema describes.
    #[serde(default)]
    pub arguments: Option<serde_json::Map<String, Value>>,
}

impl From<ToolSearchArgs> for SearchRequest {
    fn from(a: ToolSearchArgs) -> SearchRequest {
        SearchRequest {
            query: a.query,
            mode: Some(match a.mode {
                QueryMode::Text => "text".into(),
                QueryMode::Regex => "regex".into(),
            }),
            domain: a.domain,
            mutating: a.mutating,
            scopes: None,
            limit: Some(a.limit as usize),
            offset: Some(a.offset as usize),
            detail: Some(detail(a.detail)),
            load: Some(a.load),
            unload: (!a.unload.is_empty()).then_some(a.unload),
        }
    }
}

impl From<ListToolsArgs> for SearchRequest {
    fn from(a: ListToolsArgs) -> SearchRequest {
        SearchRequest {
            query: a.query.unwrap_or_default(),
            mode: None,
            domain: a.domain,
            mutating: a.mutating,
            scopes: None,
            limit: Some(a.limit as usize),
            offset: Some(a.offset as usize),
            detail: Some(detail(a.detail)),
            load: None,
            unload: None,
        }
    }
}

fn detail(d: Detail) -> String {
    match d {
        Detail::Compact => "compact".into(),
        Detail::Full => "full".into(),
    }
}

/// A meta tool's input schema and its compiled validator.
#[derive(Clone)]
pub struct MetaSchema {
    /// The advertised schema.
    pub schema: Arc<Value>,
    /// Compiled once.
    pub validator: Arc<Validator>,
}

impl std::fmt::Debug for MetaSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

/// Tidies a derived schema for advertising: no `$schema` or root `title`, nullable options
/// shown as their plain type (an absent property means "not given"), no non-standard formats.
fn tidy(mut schema: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(types)) = m.get("type")
                    && types.len() == 2
                    && types.iter().any(|t| t == "null")
                    && let Some(t) = types.iter().find(|t| *t != "null").cloned()
                {
                    m.insert("type".into(), t);
                }
                crate::surface::strip_nonstandard_format(m);
                if m.get("default") == Some(&Value::Null) {
                    m.remove("default");
                }
                for c in m.values_mut() {
                    walk(c);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    if let Value::Object(m) = &mut schema {
        m.remove("$schema");
        m.remove("title");
        m.remove("description");
    }
    walk(&mut schema);
    schema
}

fn build<T: JsonSchema>() -> MetaSchema {
    let schema = tidy(serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null));
    // The types above are fixed: their schemas always compile (a unit test checks).
    let validator = compile_schema(&schema).unwrap_or_else(|e| panic!("meta tool schema does not compile: {e}"));
    MetaSchema { schema: Arc::new(schema), validator: Arc::new(validator) }
}

/// `tool_search`'s schema.
pub fn tool_search_schema() -> &'static MetaSchema {
    static S: OnceLock<MetaSchema> = OnceLock::new();
    S.get_or_init(build::<ToolSearchArgs>)
}

/// `list_tools`'s schema.
pub fn list_tools_schema() -> &'static MetaSchema {
    static S: OnceLock<MetaSchema> = OnceLock::new();
    S.get_or_init(build::<ListToolsArgs>)
}

/// `run_tool`'s schema.
pub fn run_tool_schema() -> &'static MetaSchema {
    static S: OnceLock<MetaSchema> = OnceLock::new();
    S.get_or_init(build::<RunToolArgs>)
}

/// The schema of the meta tool `name`; `None` for any other name.
pub fn meta_schema(name: &str) -> Option<&'static MetaSchema> {
    match name {
        crate::TOOL_SEARCH => Some(tool_search_schema()),
        crate::LIST_TOOLS => Some(list_tools_schema()),
        crate::RUN_TOOL => Some(run_tool_schema()),
        _ => None,
    }
}

const _: () = assert!(Query::MAX_LIMIT >= 50);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schemas_compile_and_say_what_the_types_accept() {
        let s = tool_search_schema();
        assert_eq!(s.schema["required"], json!(["query"]));
        assert_eq!(s.schema["additionalProperties"], false);
        assert_eq!(s.schema["properties"]["limit"]["minimum"], 1);
        assert_eq!(s.schema["properties"]["limit"]["maximum"], 50);
        assert_eq!(s.schema["properties"]["domain"]["type"], "string");
        let text = s.schema.to_string();
        assert!(!text.contains("uint") && !text.contains("$defs") && !text.contains("null"), "{text}");
        assert_eq!(s.schema["properties"]["detail"]["enum"], json!(["compact", "full"]));
        assert!(s.validator.is_valid(&json!({"query": "x", "limit": 50, "detail": "full"})));
        for bad in [json!({}), json!({"query": "x", "limit": 0}), json!({"query": "x", "detail": "huge"})] {
            assert!(!s.validator.is_valid(&bad), "{bad}");
        }
        let l = list_tools_schema();
        assert!(l.validator.is_valid(&json!({})));
        assert!(!l.validator.is_valid(&json!({"scopes": ["a"]})));
        assert!(run_tool_schema().validator.is_valid(&json!({"name": "x", "arguments": {}})));
    }
}

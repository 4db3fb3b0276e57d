//! The embedded JSON Schemas of the manifest and the host configuration, compiled once, and the
//! translation of schema violations into [`Issue`]s with a field path and a fix.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::{Location, LocationSegment};
use jsonschema::{ValidationError, Validator};
use std::sync::OnceLock;

use serde_json::Value;

use crate::error::{DOCUMENT, Issue, excerpt, field, index, quote_value};

/// The JSON Schema of `tool.yaml`, as shipped in `schemas/tool-manifest.schema.json`.
pub const TOOL_MANIFEST_SCHEMA: &str = include_str!("../../../schemas/tool-manifest.schema.json");

/// The JSON Schema of the host configuration, as shipped in `schemas/quiver-config.schema.json`.
pub const QUIVER_CONFIG_SCHEMA: &str = include_str!("../../../schemas/quiver-config.schema.json");

/// The configuration's schema as code generated when this crate is built: whether a document is
/// valid, without compiling the schema at run time. Only a document it refuses goes to the
/// compiled [`DocumentSchema`], for the issues. Its `pattern`s are built without a full DFA
/// (`dfa_size_limit = 0`; the lazy DFA and the other engines match): a document is checked on a
/// first start or when it changes, where building the full DFAs cost more than all the matching.
#[jsonschema::validator(
    path = "../../schemas/quiver-config.schema.json",
    draft = Draft202012,
    methods = { validate = false, iter_errors = false },
    pattern_options = { dfa_size_limit = 0 }
)]
pub(crate) struct ConfigSchemaCode;

/// The manifest's schema as generated code (see [`ConfigSchemaCode`]).
#[jsonschema::validator(
    path = "../../schemas/tool-manifest.schema.json",
    draft = Draft202012,
    methods = { validate = false, iter_errors = false },
    pattern_options = { dfa_size_limit = 0 }
)]
pub(crate) struct ManifestSchemaCode;

/// One of the embedded document schemas, checked in two steps: the generated code says whether
/// a document is valid; a document it refuses is checked again by the schema compiled at run
/// time (once per process, on the first refusal), whose errors become the issues. So a valid
/// document costs no schema compile, and the issues are what they always were.
pub(crate) struct SchemaCheck {
    file: &'static str,
    text: &'static str,
    code: fn(&Value) -> bool,
    compiled: OnceLock<DocumentSchema>,
}

impl SchemaCheck {
    pub(crate) const fn new(file: &'static str, text: &'static str, code: fn(&Value) -> bool) -> SchemaCheck {
        SchemaCheck { file, text, code, compiled: OnceLock::new() }
    }

    /// Every violation of the schema by `instance`, as issues (none for a valid document).
    pub(crate) fn check(&self, instance: &Value) -> Vec<Issue> {
        if (self.code)(instance) {
            return Vec::new();
        }
        self.compiled().check(instance)
    }

    /// The schema compiled at run time.
    pub(crate) fn compiled(&self) -> &DocumentSchema {
        self.compiled.get_or_init(|| DocumentSchema::compile(self.file, self.text))
    }

    /// What the generated code says of `instance` (for the tests that hold it to the compiled
    /// schema).
    #[cfg(test)]
    pub(crate) fn code_says_valid(&self, instance: &Value) -> bool {
        (self.code)(instance)
    }
}

/// A compiled document schema plus its source, for looking up descriptions.
pub(crate) struct DocumentSchema {
    /// What a fix refers the reader to (`schemas/tool-manifest.schema.json`, a plugin's
    /// `config_schema`).
    file: std::borrow::Cow<'static, str>,
    schema: Value,
    validator: Validator,
}

impl DocumentSchema {
    /// Compiles an embedded schema. The embedded schemas are tested, so failure is a build bug.
    pub(crate) fn compile(file: &'static str, text: &str) -> DocumentSchema {
        let schema: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
        let validator = compile_2020_12(&schema).unwrap_or_else(|e| panic!("{file} does not compile: {e}"));
        DocumentSchema { file: file.into(), schema, validator }
    }

    /// Compiles a schema that came with a document (a plugin's `config_schema`); `about` is
    /// what its fixes refer to.
    pub(crate) fn of(about: String, schema: &Value) -> Result<DocumentSchema, String> {
        let validator = compile_2020_12(schema).map_err(|e| e.to_string())?;
        Ok(DocumentSchema { file: about.into(), schema: schema.clone(), validator })
    }

    /// Every violation of the schema by `instance`, as issues.
    pub(crate) fn check(&self, instance: &Value) -> Vec<Issue> {
        let mut issues = Vec::new();
        for error in self.validator.iter_errors(instance) {
            self.translate(&error, &mut issues);
        }
        // Field order (the JSON object's key order), indices numerically; stable within a path.
        issues.sort_by_cached_key(|issue| path_key(&issue.path));
        issues
    }

    fn translate(&self, error: &ValidationError<'_>, issues: &mut Vec<Issue>) {
        let path = instance_path(error.instance_path());
        let at = if path.is_empty() { DOCUMENT.to_owned() } else { path.clone() };
        let (node, description) = self.locate(error.evaluation_path());
        let hint = |prefix: &str| match description {
            Some(d) => format!("{prefix}{d}"),
            None => format!("{prefix}see {}", self.file),
        };
        let instance = error.instance();
        let value = quote_value(instance);
        let mut push = |path: String, message: String, fix: String| issues.push(Issue::new(path, message, fix));
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let mut allowed: Vec<&str> = node
                    .and_then(|n| n.get("properties"))
                    .and_then(Value::as_object)
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                allowed.sort_unstable();
                for name in unexpected {
                    let suggestion = allowed
                        .iter()
                        .filter(|a| edit_distance(a, name) <= 2)
                        .min_by_key(|a| edit_distance(a, name))
                        .map(|a| format!(" (did you mean `{a}`?)"))
                        .unwrap_or_default();
                    push(
                        field(&path, name),
                        format!("unknown field `{name}`"),
                        format!("remove `{name}`{suggestion}; the fields allowed here are: {}", allowed.join(", ")),
                    );
                }
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                let what = node
                    .and_then(|n| n.pointer(&format!("/properties/{}", escape_pointer(name))))
                    .and_then(|p| self.description_of(p))
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                push(field(&path, name), format!("missing required field `{name}`"), format!("add `{name}`{what}"));
            }
            ValidationErrorKind::Type { kind } => {
                let expected = match kind {
                    TypeKind::Single(t) => article(&t.to_string()),
                    TypeKind::Multiple(ts) => {
                        ts.iter().map(|t| article(&t.to_string())).collect::<Vec<_>>().join(" or ")
                    }
                };
                let scalar = matches!(**instance, Value::Number(_) | Value::Bool(_) | Value::Null);
                let fix = if expected == "a string" && scalar {
                    hint(&format!("quote the value so YAML reads it as text (\"{instance}\"); "))
                } else {
                    hint(&format!("write {expected} here; "))
                };
                push(at, format!("expected {expected}, found {} {value}", article(json_type(instance))), fix);
            }
            ValidationErrorKind::Enum { options } => {
                let allowed = allowed_values(options);
                push(at, format!("{value} is not one of the allowed values"), format!("use one of: {allowed}"));
            }
            ValidationErrorKind::Constant { expected_value } => {
                push(at, format!("{value} is not allowed here"), format!("write {}", quote_value(expected_value)));
            }
            ValidationErrorKind::Pattern { .. } => {
                push(at, format!("{value} does not have the required form"), hint(""));
            }
            ValidationErrorKind::MinLength { limit: 1 } => push(at, "must not be empty".into(), hint("")),
            ValidationErrorKind::MinLength { limit } => {
                push(at, format!("{value} is shorter than {limit} characters"), hint(""));
            }
            ValidationErrorKind::MaxLength { limit } => {
                push(
                    at,
                    format!("{value} is longer than {limit} characters"),
                    format!("shorten it to at most {limit} characters"),
                );
            }
            ValidationErrorKind::Minimum { limit } => {
                push(at, format!("{value} is below the minimum {limit}"), hint(&format!("use {limit} or more; ")));
            }
            ValidationErrorKind::ExclusiveMinimum { limit } => {
                push(at, format!("{value} must be more than {limit}"), hint(&format!("use more than {limit}; ")));
            }
            ValidationErrorKind::Maximum { limit } => {
                push(at, format!("{value} is above the maximum {limit}"), hint(&format!("use {limit} or less; ")));
            }
            ValidationErrorKind::ExclusiveMaximum { limit } => {
                push(at, format!("{value} must be less than {limit}"), hint(&format!("use less than {limit}; ")));
            }
            ValidationErrorKind::MinItems { limit } => {
                let entries = if *limit == 1 { "entry".to_owned() } else { format!("{limit} entries") };
                push(at, format!("needs at least one {entries}").replace("one 1 ", "one "), hint("add entries; "));
            }
            ValidationErrorKind::MaxItems { limit } => {
                push(at, format!("has more than {limit} entries"), format!("keep at most {limit} entries"));
            }
            ValidationErrorKind::UniqueItems => {
                push(at, "contains duplicate entries".into(), "remove the duplicates".into())
            }
            ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::AnyOf { .. } => {
                push(at, "does not match any of the allowed forms".into(), hint(""));
            }
            ValidationErrorKind::OneOfMultipleValid { .. } => {
                push(at, "matches more than one of the allowed forms".into(), hint(""));
            }
            ValidationErrorKind::PropertyNames { error: inner } => {
                let name = inner.instance().as_str().unwrap_or_default().to_owned();
                push(field(&path, &name), format!("the name `{}` is not allowed here", excerpt(&name)), hint(""));
            }
            ValidationErrorKind::FalseSchema => push(at, "is not allowed here".into(), "remove it".into()),
            _ => push(at, excerpt(&error.to_string()), hint("")),
        }
    }

    /// The schema node holding the failed keyword, and the most specific description on the way
    /// there. A description next to a `$ref` wins over the referenced definition's own.
    fn locate(&self, evaluation_path: &Location) -> (Option<&Value>, Option<&str>) {
        let segments: Vec<LocationSegment<'_>> = evaluation_path.iter().collect();
        let Some((_keyword, parents)) = segments.split_last() else {
            return (Some(&self.schema), self.description_of(&self.schema));
        };
        let mut node = &self.schema;
        let mut description = self.description_of(node);
        for segment in parents {
            let next = match segment {
                LocationSegment::Property(p) if p == "$ref" => {
                    let Some(target) = node.get("$ref").and_then(Value::as_str).and_then(|r| self.resolve(r)) else {
                        return (None, description);
                    };
                    let outer = node.get("description").is_some();
                    node = target;
                    if !outer {
                        description = self.description_of(node).or(description);
                    }
                    continue;
                }
                LocationSegment::Property(p) => node.get(p.as_ref()),
                LocationSegment::Index(i) => node.get(*i),
            };
            let Some(next) = next else { return (None, description) };
            node = next;
            description = self.description_of(node).or(description);
        }
        (Some(node), description)
    }

    fn resolve(&self, reference: &str) -> Option<&Value> {
        self.schema.pointer(reference.strip_prefix('#')?)
    }

    fn description_of<'s>(&'s self, node: &'s Value) -> Option<&'s str> {
        if let Some(d) = node.get("description").and_then(Value::as_str) {
            return Some(d);
        }
        node.get("$ref").and_then(Value::as_str).and_then(|r| self.resolve(r)).and_then(|t| self.description_of(t))
    }
}

/// Compiles a JSON Schema as draft 2020-12, never fetching anything.
pub(crate) fn compile_2020_12(schema: &Value) -> Result<Validator, ValidationError<'static>> {
    jsonschema::draft202012::options().offline().build(schema)
}

/// A JSON pointer as a field path: `/tools/2/policies` → `tools[2].policies`.
fn instance_path(location: &Location) -> String {
    let mut path = String::new();
    for segment in location.iter() {
        path = match segment {
            LocationSegment::Property(p) => field(&path, &p),
            LocationSegment::Index(i) => index(&path, i),
        };
    }
    path
}

/// Sort key of a field path: names as text, `[n]` as numbers.
fn path_key(path: &str) -> Vec<(String, usize)> {
    path.split(['.', '['])
        .map(|part| match part.strip_suffix(']').and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => (String::new(), n),
            None => (part.to_owned(), 0),
        })
        .collect()
}

fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn allowed_values(options: &Value) -> String {
    match options {
        Value::Array(values) => values
            .iter()
            .map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `a string`, `an integer`, `null`.
fn article(type_name: &str) -> String {
    match type_name {
        "null" => "null".to_owned(),
        t if t.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {t}"),
        t => format!("a {t}"),
    }
}

/// Levenshtein distance over characters, for "did you mean" suggestions (here, the router's
/// unknown tool names and the CLI's configuration entries).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        assert_eq!(edit_distance("color", "colour"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    /// Every variant of `doc` one edit away: each object without each of its keys and with an
    /// unknown key, each value replaced by values of every JSON type and by strings of the
    /// forms patterns, enums and lengths refuse.
    fn one_edit_away(doc: &Value) -> Vec<Value> {
        fn walk(node: &Value, rebuild: &dyn Fn(Value) -> Value, out: &mut Vec<Value>) {
            let replacements = [
                Value::Null,
                Value::Bool(true),
                serde_json::json!(-1),
                serde_json::json!(0),
                serde_json::json!(1.5),
                serde_json::json!(70000),
                serde_json::json!(""),
                serde_json::json!("Not Valid!"),
                serde_json::json!("x".repeat(300)),
                serde_json::json!("0.1.0"),
                serde_json::json!("fs-tools"),
                serde_json::json!([]),
                serde_json::json!(["a", "a"]),
                serde_json::json!({}),
            ];
            for r in replacements {
                out.push(rebuild(r));
            }
            match node {
                Value::Object(map) => {
                    for key in map.keys() {
                        let mut without = map.clone();
                        without.remove(key);
                        out.push(rebuild(Value::Object(without)));
                    }
                    let mut extra = map.clone();
                    extra.insert("unknown_field".into(), Value::Bool(true));
                    out.push(rebuild(Value::Object(extra)));
                    for (key, child) in map {
                        let rebuild_child = |v: Value| {
                            let mut m = map.clone();
                            m.insert(key.clone(), v);
                            rebuild(Value::Object(m))
                        };
                        walk(child, &rebuild_child, out);
                    }
                }
                Value::Array(items) => {
                    for (i, child) in items.iter().enumerate() {
                        let rebuild_child = |v: Value| {
                            let mut a = items.clone();
                            a[i] = v;
                            rebuild(Value::Array(a))
                        };
                        walk(child, &rebuild_child, out);
                    }
                    if let Some(first) = items.first() {
                        let mut twice = items.clone();
                        twice.push(first.clone());
                        out.push(rebuild(Value::Array(twice)));
                    }
                }
                _ => {}
            }
        }
        let mut out = vec![doc.clone()];
        walk(doc, &|v| v, &mut out);
        out
    }

    /// The generated code and the schema compiled at run time judge documents alike: the real
    /// documents of this repository and every document one edit away from them (thousands,
    /// valid and not). A document the generated code wrongly passed would skip its issues.
    #[test]
    fn the_generated_checks_agree_with_the_compiled_schemas() {
        let manifests = [
            include_str!("../test_data/good/full.tool.yaml"),
            include_str!("../test_data/good/minimal.tool.yaml"),
            include_str!("../../../plugins/fs-tools/tool.yaml"),
            include_str!("../../../plugins/jq-tools/tool.yaml"),
            include_str!("../../../plugins/time-tools/tool.yaml"),
            include_str!("../../../tests/plugins/marker-plugin/tool.yaml"),
        ];
        let configs = [
            include_str!("../test_data/config/full.quiver.yaml"),
            include_str!("../test_data/config/minimal.quiver.yaml"),
            include_str!("../../../quiver.yaml"),
        ];
        let cases =
            [(crate::validate::manifest_schema(), &manifests[..]), (crate::config::config_schema(), &configs[..])];
        for (check, docs) in cases {
            let (mut valid, mut invalid) = (0, 0);
            for text in docs {
                let doc = crate::yaml::parse(text).expect("the repository's documents are YAML");
                for variant in one_edit_away(&doc) {
                    let compiled = check.compiled().check(&variant).is_empty();
                    assert_eq!(check.code_says_valid(&variant), compiled, "{variant}");
                    if compiled { valid += 1 } else { invalid += 1 }
                }
            }
            // Both sides of the line are exercised.
            assert!(valid > 50 && invalid > 1000, "valid {valid}, invalid {invalid}");
        }
    }

    #[test]
    fn embedded_schemas_compile_and_are_strict() {
        for (file, text) in [("tool-manifest", TOOL_MANIFEST_SCHEMA), ("quiver-config", QUIVER_CONFIG_SCHEMA)] {
            let schema = DocumentSchema::compile(file, text);
            // Every object schema forbids unknown fields.
            let mut stack = vec![("".to_owned(), &schema.schema)];
            while let Some((at, node)) = stack.pop() {
                match node {
                    Value::Object(map) => {
                        if map.get("type").and_then(Value::as_str) == Some("object") && map.contains_key("properties") {
                            assert_eq!(map.get("additionalProperties"), Some(&Value::Bool(false)), "{file}{at}");
                        }
                        for (k, v) in map {
                            stack.push((format!("{at}/{k}"), v));
                        }
                    }
                    Value::Array(items) => stack.extend(items.iter().map(|v| (at.clone(), v))),
                    _ => {}
                }
            }
        }
    }
}

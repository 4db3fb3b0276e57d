//! Schema validation with errors a model can act on: each problem has the JSON pointer of the
//! offending value, what was expected, what was got, and a hint. Validators are precompiled in
//! the catalog; nothing is compiled here.

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use quiver_abi::ToolError;
use quiver_catalog::ToolDef;
use serde_json::{Value, json};

use crate::codes::Code;
use crate::suggest::edit_distance;

/// Problems listed per error (the rest are counted).
const MAX_ISSUES: usize = 8;

/// One problem found by validation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Issue {
    pub pointer: String,
    pub keyword: String,
    pub expected: String,
    pub got: String,
    pub hint: String,
}

impl Issue {
    fn to_json(&self) -> Value {
        json!({
            "pointer": self.pointer,
            "keyword": self.keyword,
            "expected": self.expected,
            "got": self.got,
            "hint": self.hint,
        })
    }
    fn line(&self) -> String {
        let at = if self.pointer.is_empty() { "(the arguments object)" } else { self.pointer.as_str() };
        format!("{at}: expected {}, got {}", self.expected, self.got)
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `integer 5`, `string "abc"`, `object {"a":1,...}`: type and a short rendering.
fn render(v: &Value) -> String {
    let mut text = v.to_string();
    if text.len() > 60 {
        let mut cut = 57;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    match v {
        Value::Null => "null".to_owned(),
        _ => format!("{} {text}", type_name(v)),
    }
}

fn escape_pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The schema object that holds the failing keyword (the keyword location minus its last token).
fn schema_parent<'s>(schema: &'s Value, keyword_location: &str) -> Option<&'s Value> {
    let parent = keyword_location.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
    schema.pointer(parent)
}

/// Pointer, expected, got and hint for a missing required property.
fn missing_property(pointer: &str, name: &str, parent: Option<&Value>) -> (String, String, String, String) {
    let ty = parent
        .and_then(|p| p.pointer(&format!("/properties/{}", escape_pointer_token(name))))
        .and_then(|s| s.get("type"))
        .map(|t| match t {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    let expected = match ty {
        Some(t) => format!("required property `{name}` ({t})"),
        None => format!("required property `{name}`"),
    };
    (
        format!("{pointer}/{}", escape_pointer_token(name)),
        expected,
        "nothing (missing)".to_owned(),
        format!("add `{name}`"),
    )
}

/// Pointer, expected, got and hint for properties the schema does not allow (with the closest
/// allowed name, when one is near).
fn unexpected_property(
    pointer: &str,
    unexpected: &[String],
    parent: Option<&Value>,
) -> (String, String, String, String) {
    let first = unexpected.first().cloned().unwrap_or_default();
    let allowed: Vec<&str> = parent
        .and_then(|p| p.get("properties"))
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let close = allowed.iter().filter(|a| edit_distance(a, &first) <= 2).min_by_key(|a| edit_distance(a, &first));
    // Named up to `MAX_NAMED` (a call with thousands of stray keys gets a short error).
    const MAX_NAMED: usize = 10;
    let named: Vec<&str> = unexpected.iter().take(MAX_NAMED).map(|u| echo(u)).collect();
    let mut hint = format!("remove `{}`", named.join("`, `"));
    if unexpected.len() > MAX_NAMED {
        hint.push_str(&format!(" and {} more unexpected properties", unexpected.len() - MAX_NAMED));
    }
    if let Some(c) = close {
        hint = format!("did you mean `{c}`? {hint}");
    }
    let expected = if allowed.is_empty() {
        "no other properties".to_owned()
    } else {
        format!("only the properties {}", allowed.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "))
    };
    (
        format!("{pointer}/{}", escape_pointer_token(&first)),
        expected,
        format!("unexpected property `{}`", echo(&first)),
        hint,
    )
}

/// A name the caller sent, cut to 64 characters for a message.
fn echo(name: &str) -> &str {
    match name.char_indices().nth(64) {
        Some((at, _)) => &name[..at],
        None => name,
    }
}

/// The description of a schema, for an error that names it: whitespace joined, at most 300
/// characters.
fn described(schema: Option<&Value>) -> Option<String> {
    let text = schema?.get("description")?.as_str()?.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return None;
    }
    Some(match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    })
}

fn describe(e: &ValidationError<'_>, schema: &Value) -> Issue {
    let pointer = e.instance_path().as_str().to_owned();
    let kind = e.kind();
    let keyword = kind.keyword().to_owned();
    let got = render(e.instance());
    let parent = schema_parent(schema, e.schema_path().as_str());
    let limit = |l: &dyn std::fmt::Display, op: &str| (format!("a value {op} {l}"), format!("use a value {op} {l}"));
    let (pointer, expected, got, hint) = match kind {
        ValidationErrorKind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" or "),
            };
            let hint = format!(
                "pass {} {expected} here",
                if expected.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
            );
            (pointer, expected, got, hint)
        }
        ValidationErrorKind::Required { property } => {
            missing_property(&pointer, property.as_str().unwrap_or_default(), parent)
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            unexpected_property(&pointer, unexpected, parent)
        }
        ValidationErrorKind::Enum { options } => (
            pointer,
            format!("one of {options}"),
            got,
            "use one of the listed values exactly (case matters)".to_owned(),
        ),
        ValidationErrorKind::Constant { expected_value } => {
            (pointer, format!("exactly {expected_value}"), got, format!("use {expected_value}"))
        }
        ValidationErrorKind::Minimum { limit: l } => {
            let (e, h) = limit(l, ">=");
            (pointer, e, got, h)
        }
        ValidationErrorKind::Maximum { limit: l } => {
            let (e, h) = limit(l, "<=");
            (pointer, e, got, h)
        }
        ValidationErrorKind::ExclusiveMinimum { limit: l } => {
            let (e, h) = limit(l, ">");
            (pointer, e, got, h)
        }
        ValidationErrorKind::ExclusiveMaximum { limit: l } => {
            let (e, h) = limit(l, "<");
            (pointer, e, got, h)
        }
        ValidationErrorKind::MinLength { limit: l } => {
            (pointer, format!("a string of at least {l} characters"), got, format!("use at least {l} characters"))
        }
        ValidationErrorKind::MaxLength { limit: l } => (
            pointer,
            format!("a string of at most {l} characters"),
            got,
            format!("shorten it to {l} characters or fewer"),
        ),
        ValidationErrorKind::MinItems { limit: l } => {
            (pointer, format!("an array of at least {l} items"), got, format!("pass at least {l} items"))
        }
        ValidationErrorKind::MaxItems { limit: l } => {
            (pointer, format!("an array of at most {l} items"), got, format!("pass at most {l} items"))
        }
        ValidationErrorKind::Pattern { pattern } => match described(parent) {
            // A pattern alone does not say what to write instead; the schema's description,
            // which the model has read, is named with it (the manifest checks do the same).
            Some(d) => (pointer, format!("a string matching /{pattern}/ ({})", d.trim_end_matches('.')), got, d),
            None => (
                pointer,
                format!("a string matching /{pattern}/"),
                got,
                "change the value to match the pattern".to_owned(),
            ),
        },
        ValidationErrorKind::Format { format } => {
            (pointer, format!("a valid `{format}`"), got, format!("write the value in `{format}` format"))
        }
        _ => (pointer, format!("a value satisfying `{keyword}`: {e}"), got, "see the tool's input schema".to_owned()),
    };
    Issue { pointer, keyword, expected, got, hint }
}

/// Validates `value` with a precompiled validator; `None` when it conforms. Validity is checked
/// with `is_valid` first, so a valid value costs no error collection.
fn issues(validator: &jsonschema::Validator, schema: &Value, value: &Value) -> Option<(Vec<Issue>, usize)> {
    if validator.is_valid(value) {
        return None;
    }
    let mut all: Vec<Issue> = validator.iter_errors(value).map(|e| describe(&e, schema)).collect();
    if all.is_empty() {
        // Defensive: `is_valid` and `iter_errors` disagree only on engine bugs.
        all.push(Issue {
            pointer: String::new(),
            keyword: "schema".into(),
            expected: "a value matching the schema".into(),
            got: render(value),
            hint: "see the tool's schema".into(),
        });
    }
    let total = all.len();
    all.truncate(MAX_ISSUES);
    Some((all, total))
}

fn summary(issues: &[Issue], total: usize) -> String {
    let mut s = issues.iter().map(Issue::line).collect::<Vec<_>>().join("; ");
    if total > issues.len() {
        s.push_str(&format!("; and {} more", total - issues.len()));
    }
    s
}

/// Checks call arguments against the tool's input schema: its `shape`, when it has one and
/// accepts them, else the validator (which decides, and words any error). With
/// `include_schema` (the generic lane, where the model may never have seen the schema) the
/// error carries the schema too.
pub(crate) fn arguments(tool: &str, def: &ToolDef, args: &Value, include_schema: bool) -> Result<(), ToolError> {
    let validator = def.input_validator.get().map_err(|e| uncompiled(tool, "input", e))?;
    if def.input_shape().is_some_and(|s| s.accepts_value(args)) {
        return Ok(());
    }
    let Some((list, total)) = issues(validator, &def.input_schema, args) else {
        return Ok(());
    };
    let message = format!(
        "arguments of `{tool}` do not match its input schema: {}. Fix {} and call again.",
        summary(&list, total),
        if total == 1 { "it" } else { "them" }
    );
    let mut details = json!({ "errors": list.iter().map(Issue::to_json).collect::<Vec<_>>() });
    if include_schema {
        details["input_schema"] = (*def.input_schema).clone();
    }
    Err(Code::InvalidArguments.error(message).with_details(details))
}

/// A tool whose schema, compiled on its first use, does not compile (the host compiled it at an
/// earlier load of the same bytes, so this is a fault of the host, not of the caller).
fn uncompiled(tool: &str, which: &str, error: &str) -> ToolError {
    Code::Protocol.error(format!(
        "the {which} schema of `{tool}` does not compile ({error}); the host cannot check this call. Report it to the host's operator."
    ))
}

/// Checks a meta tool's arguments against its derived schema: the same validator and the same
/// repairable errors (pointer, expected, got, hint) as a plugin tool's arguments.
pub fn meta_arguments(tool: &str, schema: &quiver_catalog::MetaSchema, args: &Value) -> Result<(), ToolError> {
    let Some((list, total)) = issues(&schema.validator, &schema.schema, args) else {
        return Ok(());
    };
    let message = format!(
        "arguments of `{tool}` do not match its input schema: {}. Fix {} and call again.",
        summary(&list, total),
        if total == 1 { "it" } else { "them" }
    );
    let details = json!({ "errors": list.iter().map(Issue::to_json).collect::<Vec<_>>() });
    Err(Code::InvalidArguments.error(message).with_details(details))
}

/// Checks a successful result against the tool's output schema (its `shape` first, as
/// [`arguments`] does).
pub(crate) fn output(tool: &str, def: &ToolDef, outputs: &Value) -> Result<(), ToolError> {
    let (Some(tool_validator), Some(schema)) = (&def.output_validator, &def.output_schema) else {
        return Ok(());
    };
    let validator = tool_validator.get().map_err(|e| uncompiled(tool, "output", e))?;
    if tool_validator.shape().is_some_and(|s| s.accepts_value(outputs)) {
        return Ok(());
    }
    let Some((list, total)) = issues(validator, schema, outputs) else {
        return Ok(());
    };
    let first = list.first().map(|i| i.pointer.clone()).unwrap_or_default();
    let message = format!(
        "`{tool}` returned a result that does not match its output schema at `{first}`: {}. This is a fault of the tool, not of the arguments; report it to the plugin's author.",
        summary(&list, total)
    );
    Err(Code::InvalidOutput
        .error(message)
        .with_details(json!({ "pointer": first, "errors": list.iter().map(Issue::to_json).collect::<Vec<_>>() })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(schema: Value, value: Value) -> Vec<Issue> {
        let v = quiver_catalog::compile_schema(&schema).unwrap();
        issues(&v, &schema, &value).map(|(i, _)| i).unwrap_or_default()
    }

    #[test]
    fn thousands_of_stray_properties_make_a_short_error() {
        let schema =
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": false});
        let validator = jsonschema::options().build(&schema).unwrap();
        let mut args = serde_json::Map::new();
        args.insert("text".into(), json!("x"));
        for i in 0..100_000 {
            args.insert(format!("extra_{i:06}"), json!(1));
        }
        let (list, _) = issues(&validator, &schema, &Value::Object(args)).unwrap();
        let text = serde_json::to_string(&list.iter().map(Issue::to_json).collect::<Vec<_>>()).unwrap();
        assert!(text.len() < 2_000, "{} bytes", text.len());
        assert!(list[0].hint.contains("and 99990 more unexpected properties"), "{}", list[0].hint);
    }

    #[test]
    fn issues_name_pointer_expected_got_and_hint() {
        let schema = json!({
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "n": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["fast", "slow"]},
                "inner": {"type": "object", "properties": {"a/b": {"type": "boolean"}}, "required": ["a/b"]}
            },
            "required": ["text"],
            "additionalProperties": false
        });
        assert!(check(schema.clone(), json!({"text": "x"})).is_empty());

        let i = check(schema.clone(), json!({"text": 5}));
        assert_eq!(i.len(), 1);
        assert_eq!(
            (i[0].pointer.as_str(), i[0].expected.as_str(), i[0].got.as_str()),
            ("/text", "string", "integer 5")
        );

        let i = check(schema.clone(), json!({}));
        assert_eq!((i[0].pointer.as_str(), i[0].expected.as_str()), ("/text", "required property `text` (string)"));
        assert_eq!(i[0].hint, "add `text`");

        let i = check(schema.clone(), json!({"text": "x", "txet": 1}));
        assert_eq!(i[0].pointer, "/txet");
        assert!(i[0].hint.starts_with("did you mean `text`?"), "{:?}", i[0]);

        let i = check(schema.clone(), json!({"text": "x", "n": 0, "mode": "Fast"}));
        let by: std::collections::HashMap<&str, &Issue> = i.iter().map(|i| (i.pointer.as_str(), i)).collect();
        assert_eq!(by["/n"].expected, "a value >= 1");
        assert!(by["/mode"].expected.starts_with("one of"), "{:?}", by["/mode"]);

        let i = check(schema, json!({"text": "x", "inner": {}}));
        assert_eq!(i[0].pointer, "/inner/a~1b");
    }

    /// A value a `pattern` refuses: the issue names the schema's description (what the pattern
    /// is for and what to write instead) with the pattern, in the message line too.
    #[test]
    fn a_pattern_issue_names_the_description_of_its_schema() {
        let schema = json!({
            "type": "object",
            "properties": {
                "filter": {"type": "string", "pattern": "^[^-]", "description": "A filter.\n  Wrap one that starts with `-` in parentheses."},
                "code": {"type": "string", "pattern": "^[A-Z]+$"}
            }
        });
        let i = check(schema.clone(), json!({"filter": "-n"}));
        assert_eq!(i[0].pointer, "/filter");
        assert_eq!(i[0].expected, "a string matching /^[^-]/ (A filter. Wrap one that starts with `-` in parentheses)");
        assert_eq!(i[0].hint, "A filter. Wrap one that starts with `-` in parentheses.");
        assert!(summary(&i, 1).contains("/filter: expected a string matching /^[^-]/ (A filter. Wrap"), "{i:?}");
        let i = check(schema, json!({"code": "ab"}));
        assert_eq!(
            (i[0].expected.as_str(), i[0].hint.as_str()),
            ("a string matching /^[A-Z]+$/", "change the value to match the pattern")
        );
    }
}

/// Entry points for the fuzz targets in `fuzz/` (not part of the API).
#[doc(hidden)]
pub mod fuzzing {
    use serde_json::Value;

    /// Compiles `schema` as a plugin load does, then checks `args` against it exactly as a call's
    /// arguments are checked: `Err` carries the repairable error summary a model would get.
    pub fn validate_arguments(schema: &Value, args: &Value) -> Result<(), String> {
        let validator = quiver_catalog::compile_schema(schema)?;
        match super::issues(&validator, schema, args) {
            None => Ok(()),
            Some((list, total)) => Err(super::summary(&list, total)),
        }
    }
}

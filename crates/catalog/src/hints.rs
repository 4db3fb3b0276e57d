//! Escalating help for a model that repeats the same malformed call. The first failure of a
//! given (tool, arguments) pair gets an excerpt of the tool's schema, the second an example call
//! built from the schema, the third the whole input schema and a warning; from the fourth on
//! the identical call is refused before it reaches the tool, with what to do instead. A
//! different call, or a success, starts over. Bounded: at most [`TRACKED`] pairs per session.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

/// Identical malformed calls answered with a hint; the next one is refused.
pub const MAX_IDENTICAL_FAILURES: u32 = 3;
/// Distinct (tool, arguments) pairs remembered per session.
const TRACKED: usize = 32;

/// The malformed calls of one session.
#[derive(Debug, Clone, Default)]
pub struct RepeatGuard {
    /// (tool, fingerprint of the arguments, failures so far), most recent last.
    failures: Vec<(String, u64, u32)>,
}

fn fingerprint(arguments: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    // serde_json's maps are sorted here, so equal arguments print equally.
    arguments.to_string().hash(&mut h);
    h.finish()
}

/// A placeholder value for a schema, for example calls.
fn example_value(schema: &Value, depth: usize) -> Value {
    if let Some(v) = schema.get("const") {
        return v.clone();
    }
    if let Some(Value::Array(e)) = schema.get("enum")
        && let Some(first) = e.first()
    {
        return first.clone();
    }
    if let Some(v) = schema.get("default") {
        return v.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
        _ => "",
    };
    match ty {
        "string" => Value::String("<text>".to_owned()),
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "array" => match schema.get("items") {
            Some(items) if depth < 3 => json!([example_value(items, depth + 1)]),
            _ => json!([]),
        },
        "object" if depth < 3 => example_object(schema, depth + 1),
        _ => Value::Null,
    }
}

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn example_object(schema: &Value, depth: usize) -> Value {
    let mut out = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for name in required(schema) {
            if let Some(p) = props.get(name) {
                out.insert(name.to_owned(), example_value(p, depth));
            }
        }
    }
    Value::Object(out)
}

/// The fields of a schema as one line: `a (string, required), b (integer)`.
fn excerpt(schema: &Value) -> String {
    let req = required(schema);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "no named fields".to_owned();
    };
    let mut fields: Vec<(bool, String)> = props
        .iter()
        .map(|(k, p)| {
            let ty = match p.get("type") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("|"),
                _ if p.get("enum").is_some() => "enum".to_owned(),
                _ => "value".to_owned(),
            };
            let choices = match p.get("enum").and_then(Value::as_array) {
                Some(e) => format!(": one of {}", e.iter().map(Value::to_string).collect::<Vec<_>>().join(", ")),
                None => String::new(),
            };
            let is_req = req.contains(&k.as_str());
            (is_req, format!("{k} ({ty}{}{choices})", if is_req { ", required" } else { "" }))
        })
        .collect();
    fields.sort_by_key(|(r, _)| !*r);
    fields.into_iter().map(|(_, f)| f).collect::<Vec<_>>().join("; ")
}

/// What to add to a failed call's error.
#[derive(Debug, Clone, PartialEq)]
pub struct Hint {
    /// How many times this identical call has now failed.
    pub failures: u32,
    /// Text to append to the error message.
    pub message: String,
    /// Structured form for the error's `details.hint`.
    pub details: Value,
}

impl RepeatGuard {
    /// `Some(message)` when this exact call already failed [`MAX_IDENTICAL_FAILURES`] times: it
    /// must not run again.
    pub fn refusal(&self, tool: &str, arguments: &Value) -> Option<String> {
        // The common case, no failure recorded, costs no fingerprint.
        if self.failures.is_empty() {
            return None;
        }
        let fp = fingerprint(arguments);
        let (_, _, n) = self.failures.iter().find(|(t, f, _)| t == tool && *f == fp)?;
        (*n >= MAX_IDENTICAL_FAILURES).then(|| {
            format!(
                "refused without running: this exact call of `{tool}` has failed {n} times with invalid arguments. Do not \
                 repeat it. Change the arguments to match the example from the previous error, look the tool up again \
                 with tool_search (detail: full) or list_tools, or ask the user for the missing information."
            )
        })
    }

    /// Records a call that failed with `invalid_arguments` and returns the hint for it.
    pub fn record_failure(&mut self, tool: &str, arguments: &Value, schema: Option<&Value>) -> Hint {
        let fp = fingerprint(arguments);
        let n = match self.failures.iter().position(|(t, f, _)| t == tool && *f == fp) {
            Some(i) => {
                let mut entry = self.failures.remove(i);
                entry.2 += 1;
                let n = entry.2;
                self.failures.push(entry);
                n
            }
            None => {
                if self.failures.len() == TRACKED {
                    self.failures.remove(0);
                }
                self.failures.push((tool.to_owned(), fp, 1));
                1
            }
        };
        let empty = json!({});
        let schema = schema.unwrap_or(&empty);
        match n {
            1 => {
                let fields = excerpt(schema);
                Hint {
                    failures: n,
                    message: format!("Hint: `{tool}` takes {fields}."),
                    details: json!({ "level": 1, "fields": fields }),
                }
            }
            2 => {
                let example = example_object(schema, 0);
                Hint {
                    failures: n,
                    message: format!(
                        "Hint (same call failed twice): a valid call looks like {{\"name\": \"{tool}\", \"arguments\": {example}}}; \
                         replace the placeholders with real values."
                    ),
                    details: json!({ "level": 2, "example": { "name": tool, "arguments": example } }),
                }
            }
            _ => Hint {
                failures: n,
                message: format!(
                    "Hint (same call failed {n} times): here is the whole input schema of `{tool}`; an identical call \
                     will now be refused. {schema}"
                ),
                details: json!({ "level": 3, "input_schema": schema, "next_identical_call": "refused" }),
            },
        }
    }

    /// Forgets the failures of a call that has now succeeded (or of every call of `tool` with
    /// these arguments).
    pub fn record_success(&mut self, tool: &str, arguments: &Value) {
        if self.failures.is_empty() {
            return;
        }
        let fp = fingerprint(arguments);
        self.failures.retain(|(t, f, _)| !(t == tool && *f == fp));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["write", "delete"]},
                "path": {"type": "string"},
                "count": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["action", "path", "tags"]
        })
    }

    #[test]
    fn hints_escalate_then_the_call_is_refused() {
        let mut g = RepeatGuard::default();
        let args = json!({"path": 3});
        assert_eq!(g.refusal("fs_edit", &args), None);
        let h1 = g.record_failure("fs_edit", &args, Some(&schema()));
        assert!(h1.message.contains("action (string, required: one of \"write\", \"delete\")"), "{}", h1.message);
        assert!(h1.message.contains("count (integer)"));
        let h2 = g.record_failure("fs_edit", &args, Some(&schema()));
        assert_eq!(
            h2.details["example"]["arguments"],
            json!({"action": "write", "path": "<text>", "tags": ["<text>"]})
        );
        let h3 = g.record_failure("fs_edit", &args, Some(&schema()));
        assert_eq!(h3.details["input_schema"], schema());
        let texts = [&h1.message, &h2.message, &h3.message];
        assert!(texts[0] != texts[1] && texts[1] != texts[2] && texts[0] != texts[2]);
        let refused = g.refusal("fs_edit", &args).unwrap();
        assert!(refused.contains("failed 3 times") && refused.contains("tool_search"), "{refused}");
        // Other arguments, or another tool, are not refused; a success clears the record.
        assert_eq!(g.refusal("fs_edit", &json!({"path": 4})), None);
        assert_eq!(g.refusal("fs_read", &args), None);
        g.record_success("fs_edit", &args);
        assert_eq!(g.refusal("fs_edit", &args), None);
        assert_eq!(g.record_failure("fs_edit", &args, Some(&schema())).failures, 1);
    }

    #[test]
    fn memory_is_bounded() {
        let mut g = RepeatGuard::default();
        for i in 0..100 {
            g.record_failure("t", &json!({ "i": i }), None);
        }
        assert_eq!(g.failures.len(), TRACKED);
    }
}

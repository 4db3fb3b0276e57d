//! Extraction of searchable parameter documentation from a JSON Schema.

use serde_json::Value;

use super::ParamDoc;

/// Deepest nesting of object properties followed.
const MAX_DEPTH: usize = 6;
/// Most parameters taken from one schema (bounds index size for pathological schemas).
const MAX_PARAMS: usize = 256;
/// Most enum values quoted into one parameter description.
const MAX_ENUM_VALUES: usize = 64;

/// Collects parameter names (nested ones as dotted paths, `address.city`), descriptions and enum
/// values (appended to the description as `Values: a, b.`) from a JSON Schema object. Array
/// `items`, `anyOf`/`oneOf`/`allOf` branches and object `additionalProperties` are followed;
/// anything that is not a schema object is ignored.
pub fn params_from_schema(schema: &Value) -> Vec<ParamDoc> {
    let mut out = Vec::new();
    collect(schema, "", 0, &mut out);
    out
}

/// How many distinct names the schema's top-level `required` array lists (0 when it has none).
pub(crate) fn required_count(schema: &Value) -> usize {
    let Some(list) = schema.get("required").and_then(Value::as_array) else {
        return 0;
    };
    let mut names: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

fn collect(schema: &Value, prefix: &str, depth: usize, out: &mut Vec<ParamDoc>) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if depth > MAX_DEPTH || out.len() >= MAX_PARAMS {
        return;
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            if out.len() >= MAX_PARAMS {
                return;
            }
            let full = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            out.push(ParamDoc { name: full.clone(), description: describe(sub) });
            collect(sub, &full, depth + 1, out);
        }
    }
    if let Some(items) = obj.get("items") {
        match items {
            Value::Array(list) => list.iter().for_each(|s| collect(s, prefix, depth + 1, out)),
            other => collect(other, prefix, depth + 1, out),
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(list) = obj.get(key).and_then(Value::as_array) {
            list.iter().for_each(|s| collect(s, prefix, depth + 1, out));
        }
    }
    if let Some(extra @ Value::Object(_)) = obj.get("additionalProperties") {
        collect(extra, prefix, depth + 1, out);
    }
}

/// The description of one property, with its title and enum values.
fn describe(sub: &Value) -> String {
    let mut text = String::new();
    for key in ["title", "description"] {
        if let Some(s) = sub.get(key).and_then(Value::as_str) {
            if !text.is_empty() {
                text.push_str(". ");
            }
            text.push_str(s.trim());
        }
    }
    let mut values = Vec::new();
    enum_values(sub, 0, &mut values);
    if !values.is_empty() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str("Values: ");
        text.push_str(&values.join(", "));
        text.push('.');
    }
    text
}

fn enum_values(sub: &Value, depth: usize, out: &mut Vec<String>) {
    if depth > 2 || out.len() >= MAX_ENUM_VALUES {
        return;
    }
    if let Some(list) = sub.get("enum").and_then(Value::as_array) {
        for v in list {
            if out.len() >= MAX_ENUM_VALUES {
                break;
            }
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Number(n) => out.push(n.to_string()),
                _ => {}
            }
        }
    }
    if let Some(Value::String(s)) = sub.get("const") {
        out.push(s.clone());
    }
    if let Some(items @ Value::Object(_)) = sub.get("items") {
        enum_values(items, depth + 1, out);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(list) = sub.get(key).and_then(Value::as_array) {
            list.iter().for_each(|s| enum_values(s, depth + 1, out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extracts_nested_params_and_enums() {
        let schema = json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City, State"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "address": {
                    "type": "object",
                    "properties": {"zip": {"type": "string", "description": "Postal code"}}
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"label": {"type": "string"}}}
                },
                "modes": {"type": "array", "items": {"enum": ["fast", 3]}}
            }
        });
        let mut params = params_from_schema(&schema);
        // serde_json may or may not preserve key order (feature `preserve_order`).
        params.sort_by(|a, b| a.name.cmp(&b.name));
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["address", "address.zip", "location", "modes", "tags", "tags.label", "unit"]);
        let unit = params_from_schema(&json!({"properties": {"unit": {"enum": ["celsius", "f"]}}}));
        assert_eq!(unit[0].description, "Values: celsius, f.");
        assert_eq!(params[1].description, "Postal code");
        assert_eq!(params[3].description, "Values: fast, 3.");
    }

    #[test]
    fn counts_each_required_name_once() {
        assert_eq!(required_count(&json!({"required": ["a", "b", "a", 3]})), 2);
        assert_eq!(required_count(&json!({"properties": {"a": {}}})), 0);
        assert_eq!(required_count(&json!({"required": "a"})), 0);
        assert_eq!(required_count(&json!("nope")), 0);
    }

    #[test]
    fn ignores_non_schemas() {
        assert!(params_from_schema(&json!("nope")).is_empty());
        assert!(params_from_schema(&json!({"properties": [1, 2]})).is_empty());
    }
}

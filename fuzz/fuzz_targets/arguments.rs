//! Untrusted call arguments (and schemas) through the router's argument validation and its
//! repairable error messages: never a panic. The input is split at the first NUL: a schema, then
//! the arguments; a fixed schema with every keyword kind is used when the first part is not one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let (a, b) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&data[..0], data),
    };
    let schema: Value = serde_json::from_slice(a).unwrap_or_else(|_| {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                "action": {"enum": ["read", "write", "delete"]},
                "n": {"type": "integer", "minimum": 0, "maximum": 100},
                "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 8},
                "nested": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "additionalProperties": false}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    });
    if let Ok(args) = serde_json::from_slice::<Value>(b) {
        let _ = quiver_router::fuzzing::validate_arguments(&schema, &args);
    }
});

//! The bodies of the four fuzz targets, shared by the coverage-guided `cargo fuzz` binaries in
//! `fuzz/fuzz_targets/` and the bounded stable run in the test suite (`tests/it/fuzz.rs`), so the
//! two cannot drift. Each body takes arbitrary bytes and asserts the target's invariants; a panic
//! (or a failed assertion) is a crash. No I/O, no libfuzzer: plain Rust on any toolchain.

use std::sync::OnceLock;

use quiver_manifest::{KeyPair, TrustedKeys};
use serde_json::{Value, json};

/// The data every fuzzed signature is verified against.
pub const SIGNED_DATA: &[u8] = b"manifest_version: 1\n";

/// A key pair generated once per process and the trust list holding only its public key. The
/// fuzzer never sees the secret key.
pub fn keys() -> &'static (KeyPair, TrustedKeys) {
    static KEYS: OnceLock<(KeyPair, TrustedKeys)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let pair = KeyPair::generate();
        let trusted = TrustedKeys::new().with("fuzz", "fuzz", pair.public_key().clone());
        (pair, trusted)
    })
}

/// Untrusted YAML through the manifest and configuration readers: never a panic, never a hang
/// (size and nesting caps), only `Ok` or an error carrying at least one issue.
pub fn manifest(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = quiver_manifest::Manifest::from_yaml(text, "fuzz.tool.yaml") {
            assert!(!e.issues.is_empty(), "a refused manifest names no issue");
        }
        if let Err(e) = quiver_manifest::HostConfig::from_yaml(text, "fuzz.quiver.yaml") {
            assert!(!e.issues.is_empty(), "a refused host config names no issue");
        }
    }
}

/// Untrusted signature and key text: key parsing, signature decoding and verification against
/// the fixed key, and the bundle trusted-comment check. Never a panic; nothing the fuzzer writes
/// verifies, since it does not hold the secret key.
pub fn signature(data: &[u8]) {
    let (_, trusted) = keys();
    let text = String::from_utf8_lossy(data);
    let _ = quiver_manifest::PublicKey::parse(&text);
    let _ = quiver_manifest::KeyPair::from_secret_key_text(&text);
    assert!(
        quiver_manifest::verify(trusted, SIGNED_DATA, &text).is_err(),
        "a signature not made with the fixed key verified: {text:?}"
    );
    let _ = quiver_manifest::check_bundle_comment(&text, "fuzz", "1.0.0", "00");
}

/// Untrusted bytes as an incoming MCP message (stdio line or HTTP body): decoded, or refused
/// with a JSON-RPC error that says something, never a panic.
pub fn mcp_message(data: &[u8]) {
    if let Err(error) = quiver_mcp::fuzzing::decode(data) {
        assert!(!error.is_empty(), "an empty JSON-RPC refusal");
    }
}

/// The schema used when the fuzzed input carries none: every keyword kind a tool uses.
pub fn default_schema() -> Value {
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
}

/// Untrusted call arguments (and schemas) through schema compilation and the router's argument
/// validation with its repairable error messages: never a panic, and a refusal always says
/// something. The input is split at the first NUL: a schema, then the arguments; the default
/// schema is used when the first part is not JSON.
pub fn arguments(data: &[u8]) {
    let (a, b) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&data[..0], data),
    };
    let schema: Value = serde_json::from_slice(a).unwrap_or_else(|_| default_schema());
    if let Ok(args) = serde_json::from_slice::<Value>(b)
        && let Err(message) = quiver_router::fuzzing::validate_arguments(&schema, &args)
    {
        assert!(!message.is_empty(), "an empty validation message");
    }
}

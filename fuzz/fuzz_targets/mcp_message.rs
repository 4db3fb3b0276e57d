//! Untrusted bytes as an incoming MCP message (stdio line or HTTP body): decoded or refused with
//! a JSON-RPC error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = quiver_mcp::fuzzing::decode(data);
});

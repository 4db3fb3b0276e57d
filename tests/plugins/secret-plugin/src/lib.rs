//! Test plugin for plugin secrets: `secret_probe` declares the secret `API_TOKEN` and answers
//! with its length and an FNV-1a digest of its value, so a test can prove the tool received the
//! right value while the value itself appears in no output. Not a bundled user tool.

use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
};

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ProbeInput {}

/// What arrived.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ProbeOutput {
    /// True when the secret was in the request.
    pub received: bool,
    /// Its length in bytes.
    pub length: usize,
    /// FNV-1a (64-bit) of its bytes, 16 hex digits.
    pub fnv1a: String,
}

/// FNV-1a, 64-bit: a digest the test recomputes (not for security).
pub fn fnv1a(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Reports on the `API_TOKEN` secret.
pub struct Probe;
impl Tool for Probe {
    const NAME: &'static str = "secret_probe";
    type Input = ProbeInput;
    type Output = ProbeOutput;
    fn call(&self, _input: ProbeInput, cx: &mut Context<'_>) -> Result<ProbeOutput, ToolError> {
        let secret = cx.secret("API_TOKEN").unwrap_or_default();
        cx.log(quiver_abi::LogLevel::Info, &format!("secret_probe ran; secret length {}", secret.len()));
        Ok(ProbeOutput { received: !secret.is_empty(), length: secret.len(), fnv1a: fnv1a(secret.as_bytes()) })
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [Probe],
}

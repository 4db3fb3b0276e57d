//! Test plugin for the loader's security tests: when the library is opened, a constructor writes
//! a line naming its version to the file named by `QUIVER_TEST_MARKER` (if set), so a test can prove that a rejected bundle
//! never ran any code. Its tools echo, panic and sleep. Not a bundled user tool.

use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
};

#[used]
#[unsafe(link_section = ".init_array")]
static MARKER_CONSTRUCTOR: extern "C" fn() = write_marker;

extern "C" fn write_marker() {
    use std::io::Write;
    if let Some(path) = std::env::var_os("QUIVER_TEST_MARKER")
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        let _ = writeln!(f, "constructor ran: marker-plugin {}", build_version());
    }
}

/// Echo input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct EchoInput {
    /// Text to return.
    pub text: String,
}

/// Echo output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct EchoOutput {
    /// The same text.
    pub text: String,
    /// Version of this plugin build, so hot-swap tests can tell builds apart.
    pub version: String,
    /// The plugin settings the host sent with the call (omitted when none).
    #[serde(default, skip_serializing_if = "quiver_abi::serde_json::Value::is_null")]
    pub config: quiver_abi::serde_json::Value,
}

/// Echoes its input.
pub struct Echo;
impl Tool for Echo {
    const NAME: &'static str = "marker_echo";
    type Input = EchoInput;
    type Output = EchoOutput;
    fn call(&self, input: EchoInput, cx: &mut Context<'_>) -> Result<EchoOutput, ToolError> {
        Ok(EchoOutput { text: input.text, version: build_version().to_owned(), config: cx.config().clone() })
    }
}

/// Panics.
pub struct Panic;
impl Tool for Panic {
    const NAME: &'static str = "marker_panic";
    type Input = EchoInput;
    type Output = EchoOutput;
    fn call(&self, input: EchoInput, _cx: &mut Context<'_>) -> Result<EchoOutput, ToolError> {
        panic!("marker_panic was asked to panic with {:?}", input.text)
    }
}

/// Sleep input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SleepInput {
    /// Milliseconds to sleep.
    pub ms: u64,
}

/// Sleep output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SleepOutput {
    /// Milliseconds actually slept.
    pub slept_ms: u64,
    /// True when the sleep stopped early because the call was cancelled.
    pub cancelled: bool,
}

/// Sleeps in 5 ms steps, stopping early on cancellation.
pub struct Sleep;
impl Tool for Sleep {
    const NAME: &'static str = "marker_sleep";
    type Input = SleepInput;
    type Output = SleepOutput;
    fn call(&self, input: SleepInput, cx: &mut Context<'_>) -> Result<SleepOutput, ToolError> {
        let start = std::time::Instant::now();
        while (start.elapsed().as_millis() as u64) < input.ms {
            if cx.is_cancelled() {
                return Ok(SleepOutput { slept_ms: start.elapsed().as_millis() as u64, cancelled: true });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        Ok(SleepOutput { slept_ms: start.elapsed().as_millis() as u64, cancelled: false })
    }
}

/// The line of `marker_echo` that `QUIVER_MARKER_ECHO_LINES` replaces.
pub const ECHO_POLICIES_LINE: &str = "    policies: {execution: inline}";

/// The embedded manifest. Tests build a second copy of this plugin with
/// `QUIVER_MARKER_VERSION=0.2.0` set at compile time to get a genuinely different library whose
/// embedded manifest declares that version (hot-swap and downgrade tests), and with
/// `QUIVER_MARKER_ECHO_LINES` to give `marker_echo` other manifest lines in place of
/// [`ECHO_POLICIES_LINE`] (result-size tests: a small limit, a stricter output schema).
fn manifest() -> &'static str {
    const SOURCE: &str = include_str!("../tool.yaml");
    let mut text = std::borrow::Cow::Borrowed(SOURCE);
    if let Some(v) = option_env!("QUIVER_MARKER_VERSION") {
        text = text.replacen("version: 0.1.0", &format!("version: {v}"), 1).into();
    }
    if let Some(lines) = option_env!("QUIVER_MARKER_ECHO_LINES") {
        text = text.replacen(ECHO_POLICIES_LINE, lines, 1).into();
    }
    match text {
        std::borrow::Cow::Borrowed(s) => s,
        std::borrow::Cow::Owned(s) => Box::leak(s.into_boxed_str()),
    }
}

/// Version of this build (see [`manifest`]).
fn build_version() -> &'static str {
    option_env!("QUIVER_MARKER_VERSION").unwrap_or(env!("CARGO_PKG_VERSION"))
}

#[cfg(not(feature = "router-tools"))]
quiver_abi::export_plugin! {
    manifest: manifest(),
    tools: [Echo, Panic, Sleep],
}

// With the feature `router-tools`, the plugin exports the router's test tools as well (see
// `router_tools.rs` and `router-tools.yaml`); without it, exactly the tools above.
#[cfg(feature = "router-tools")]
mod router_tools;

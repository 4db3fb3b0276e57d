//! Tools for the router's tests, compiled only with the feature `router-tools` (so the loader
//! and CLI tests keep seeing exactly `marker_echo`, `marker_panic` and `marker_sleep`). Their
//! manifest entries are in `router-tools.yaml`, appended to `tool.yaml`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use quiver_abi::{
    Context, LogLevel, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
    serde_json::{Value, json},
};

use super::{Echo, EchoInput, Panic, Sleep};

/// `tool.yaml` (as [`super::manifest`] gives it) followed by `router-tools.yaml`.
pub fn manifest() -> &'static str {
    let text = format!("{}\n{}", super::manifest().trim_end(), include_str!("../router-tools.yaml"));
    Box::leak(text.into_boxed_str())
}

/// Flaky input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FlakyInput {
    /// Calls are counted per key.
    pub key: String,
    /// How many calls with this key fail before one succeeds.
    pub failures: u32,
}

/// Flaky output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FlakyOutput {
    /// Calls made with this key, this one included.
    pub attempts: u32,
}

static ATTEMPTS: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// Fails with a retryable error the first `failures` times per key.
pub struct Flaky;
impl Tool for Flaky {
    const NAME: &'static str = "marker_flaky";
    type Input = FlakyInput;
    type Output = FlakyOutput;
    fn call(&self, input: FlakyInput, _cx: &mut Context<'_>) -> Result<FlakyOutput, ToolError> {
        let n = {
            let mut m = ATTEMPTS.lock().unwrap_or_else(|e| e.into_inner());
            let n = m.entry(input.key).or_insert(0);
            *n += 1;
            *n
        };
        if n <= input.failures {
            return Err(ToolError::tool(format!("transient failure {n} of {}", input.failures)).retryable());
        }
        Ok(FlakyOutput { attempts: n })
    }
}

/// Fail input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FailInput {
    /// Fail this call.
    pub fail: bool,
}

/// Fail output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FailOutput {
    /// Always true.
    pub ok: bool,
}

/// Fails (not retryable) when asked to.
pub struct Fail;
impl Tool for Fail {
    const NAME: &'static str = "marker_fail";
    type Input = FailInput;
    type Output = FailOutput;
    fn call(&self, input: FailInput, _cx: &mut Context<'_>) -> Result<FailOutput, ToolError> {
        if input.fail { Err(ToolError::tool("failed on purpose")) } else { Ok(FailOutput { ok: true }) }
    }
}

/// Big input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct BigInput {
    /// Bytes of text to return.
    pub bytes: u64,
}

/// Text output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct TextOutput {
    /// The text.
    pub text: String,
}

/// Returns `bytes` bytes of text (digits, so the JSON is as long as the text plus a few bytes).
pub struct Big;
impl Tool for Big {
    const NAME: &'static str = "marker_big";
    type Input = BigInput;
    type Output = TextOutput;
    fn call(&self, input: BigInput, _cx: &mut Context<'_>) -> Result<TextOutput, ToolError> {
        let text: String = (0..input.bytes).map(|i| char::from(b'0' + (i % 10) as u8)).collect();
        Ok(TextOutput { text })
    }
}

/// Bad-output output: a string the manifest's output schema says is an integer.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct BadOutput {
    /// The input text.
    pub value: String,
}

/// Violates its (manifest) output schema.
pub struct BadOutputTool;
impl Tool for BadOutputTool {
    const NAME: &'static str = "marker_bad_output";
    type Input = EchoInput;
    type Output = BadOutput;
    fn call(&self, input: EchoInput, _cx: &mut Context<'_>) -> Result<BadOutput, ToolError> {
        Ok(BadOutput { value: input.text })
    }
}

/// Delete input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DeleteInput {
    /// What to delete.
    pub key: String,
}

/// Delete output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DeleteOutput {
    /// The key.
    pub deleted: String,
    /// Whether the host said a person confirmed the call.
    pub confirmed: bool,
}

/// Destructive (pretend) deletion.
pub struct Delete;
impl Tool for Delete {
    const NAME: &'static str = "marker_delete";
    type Input = DeleteInput;
    type Output = DeleteOutput;
    fn call(&self, input: DeleteInput, cx: &mut Context<'_>) -> Result<DeleteOutput, ToolError> {
        Ok(DeleteOutput { deleted: input.key, confirmed: cx.confirmed() })
    }
}

/// No input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct NoInput {}

/// Secret output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SecretOutput {
    /// The secret.
    pub secret: String,
}

/// Needs a scope.
pub struct Secret;
impl Tool for Secret {
    const NAME: &'static str = "marker_secret";
    type Input = NoInput;
    type Output = SecretOutput;
    fn call(&self, _input: NoInput, _cx: &mut Context<'_>) -> Result<SecretOutput, ToolError> {
        Ok(SecretOutput { secret: "s3cret".to_owned() })
    }
}

/// Consolidated text input (the manifest overrides the schema with the `action` enum).
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct TextInput {
    /// `echo`, `shout` or `erase`.
    pub action: String,
    /// The text.
    pub text: String,
}

/// Consolidated tool: echo, shout, erase.
pub struct Text;
impl Tool for Text {
    const NAME: &'static str = "marker_text";
    type Input = TextInput;
    type Output = TextOutput;
    fn call(&self, input: TextInput, _cx: &mut Context<'_>) -> Result<TextOutput, ToolError> {
        match input.action.as_str() {
            "echo" => Ok(TextOutput { text: input.text }),
            "shout" => Ok(TextOutput { text: input.text.to_uppercase() }),
            "erase" => Ok(TextOutput { text: String::new() }),
            other => Err(ToolError::invalid(format!("unknown action `{other}`"))),
        }
    }
}

/// The standalone predecessor of `marker_text`'s `shout` action (same output).
pub struct Shout;
impl Tool for Shout {
    const NAME: &'static str = "marker_shout";
    type Input = EchoInput;
    type Output = TextOutput;
    fn call(&self, input: EchoInput, _cx: &mut Context<'_>) -> Result<TextOutput, ToolError> {
        Ok(TextOutput { text: input.text.to_uppercase() })
    }
}

/// A removed tool (never dispatched by the host).
pub struct Gone;
impl Tool for Gone {
    const NAME: &'static str = "marker_gone";
    type Input = EchoInput;
    type Output = TextOutput;
    fn call(&self, input: EchoInput, _cx: &mut Context<'_>) -> Result<TextOutput, ToolError> {
        Ok(TextOutput { text: input.text })
    }
}

/// Ask input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct AskInput {
    /// The question.
    pub question: String,
}

/// Ask output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct AskOutput {
    /// The client's elicitation result.
    pub answer: Value,
}

/// Asks the user through the host.
pub struct Ask;
impl Tool for Ask {
    const NAME: &'static str = "marker_ask";
    type Input = AskInput;
    type Output = AskOutput;
    fn call(&self, input: AskInput, cx: &mut Context<'_>) -> Result<AskOutput, ToolError> {
        let answer =
            cx.elicit(&input.question, json!({"type": "object", "properties": {"answer": {"type": "string"}}}))?;
        Ok(AskOutput { answer })
    }
}

/// Wait output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct WaitOutput {
    /// Milliseconds waited.
    pub waited_ms: u64,
    /// True when the wait stopped because the call was cancelled.
    pub cancelled: bool,
}

/// Waits in 2 ms steps; on cancellation logs `marker_wait saw cancellation after N ms`.
pub struct Wait;
impl Tool for Wait {
    const NAME: &'static str = "marker_wait";
    type Input = super::SleepInput;
    type Output = WaitOutput;
    fn call(&self, input: super::SleepInput, cx: &mut Context<'_>) -> Result<WaitOutput, ToolError> {
        let start = std::time::Instant::now();
        while (start.elapsed().as_millis() as u64) < input.ms {
            if cx.is_cancelled() {
                let waited_ms = start.elapsed().as_millis() as u64;
                cx.log(LogLevel::Info, &format!("marker_wait saw cancellation after {waited_ms} ms"));
                return Ok(WaitOutput { waited_ms, cancelled: true });
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(WaitOutput { waited_ms: start.elapsed().as_millis() as u64, cancelled: false })
    }
}

/// Remember input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct RememberInput {
    /// Text to remember for the next call.
    pub text: String,
    /// Forget the remembered text instead.
    #[serde(default)]
    pub forget: bool,
}

/// Remember output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct RememberOutput {
    /// What the previous call of this session remembered.
    pub previous: Option<String>,
}

/// Reads and writes the host's session memory (`Context::recall` / `Context::remember`).
pub struct Remember;
impl Tool for Remember {
    const NAME: &'static str = "marker_remember";
    type Input = RememberInput;
    type Output = RememberOutput;
    fn call(&self, input: RememberInput, cx: &mut Context<'_>) -> Result<RememberOutput, ToolError> {
        let previous = cx.recall("last").and_then(|v| v.as_str().map(str::to_owned));
        cx.remember("last", if input.forget { Value::Null } else { Value::String(input.text) });
        Ok(RememberOutput { previous })
    }
}

/// Charge input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ChargeInput {
    /// Charges are counted per key.
    pub key: String,
    /// How the call ends after the charge is recorded: `ok`, or an error with this code,
    /// marked retryable.
    #[serde(default)]
    pub outcome: Option<String>,
    /// Milliseconds to wait after recording the charge (past the 300 ms deadline: a timeout
    /// of a call that took effect).
    #[serde(default)]
    pub ms: u64,
}

/// Charge output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ChargeOutput {
    /// Charges recorded with this key, this one included.
    pub charges: u32,
}

static CHARGES: Mutex<BTreeMap<String, u32>> = Mutex::new(BTreeMap::new());

/// A write that is not safe to repeat: every call records a charge before it answers, so an
/// error after that (a crash, a timeout) leaves the charge made.
pub struct Charge;
impl Tool for Charge {
    const NAME: &'static str = "marker_charge";
    type Input = ChargeInput;
    type Output = ChargeOutput;
    fn call(&self, input: ChargeInput, _cx: &mut Context<'_>) -> Result<ChargeOutput, ToolError> {
        let charges = {
            let mut m = CHARGES.lock().unwrap_or_else(|e| e.into_inner());
            let n = m.entry(input.key).or_insert(0);
            *n += 1;
            *n
        };
        std::thread::sleep(std::time::Duration::from_millis(input.ms));
        match input.outcome.as_deref() {
            None | Some("ok") => Ok(ChargeOutput { charges }),
            Some(code) => Err(ToolError::new(code, format!("charge {charges} ended with {code}")).retryable()),
        }
    }
}

quiver_abi::export_plugin! {
    manifest: manifest(),
    tools: [Echo, Panic, Sleep, Flaky, Fail, Big, BadOutputTool, Delete, Secret, Text, Shout, Gone, Ask, Wait, Remember, Charge],
}

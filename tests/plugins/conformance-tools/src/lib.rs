//! Test plugin for `cargo xtask conformance`: the tools the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) calls, with the names, arguments and results its server
//! scenarios expect. It exercises every host service end to end through the real ABI, router and
//! MCP server: content blocks (image, audio, embedded resources), logs, progress, errors,
//! sampling and elicitation. Three extras serve Quiver's own MCP tests, not the suite: a
//! deprecated alias of `test_simple_text`, the deferred `test_deferred_echo` and
//! `test_confirmed_write`, which needs a person's confirmation. Not a bundled user tool.

use std::time::Duration;

use quiver_abi::{
    Context, LogLevel, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
    serde_json::{Value, json},
};

/// A 1x1 red PNG.
const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A WAV file of eight silent 8-bit samples at 8 kHz.
const WAV_BASE64: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct NoArgs {}

/// What every tool of this plugin returns as structured content: a one-line summary (the
/// suite reads the content blocks).
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Summary {
    /// What the tool did.
    pub summary: String,
}

fn text(cx: &mut Context<'_>, text: impl Into<String>) -> Result<Summary, ToolError> {
    let text = text.into();
    cx.add_content(json!({ "type": "text", "text": text }));
    Ok(Summary { summary: text })
}

fn image_block() -> Value {
    json!({ "type": "image", "data": PNG_BASE64, "mimeType": "image/png" })
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// `test_simple_text`.
pub struct SimpleText;
impl Tool for SimpleText {
    const NAME: &'static str = "test_simple_text";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        text(cx, "This is a simple text response for testing.")
    }
}

/// `test_image_content`.
pub struct ImageContent;
impl Tool for ImageContent {
    const NAME: &'static str = "test_image_content";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        cx.add_content(image_block());
        Ok(Summary { summary: "one 1x1 PNG image".into() })
    }
}

/// `test_audio_content`.
pub struct AudioContent;
impl Tool for AudioContent {
    const NAME: &'static str = "test_audio_content";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        cx.add_content(json!({ "type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav" }));
        Ok(Summary { summary: "one short WAV clip".into() })
    }
}

/// `test_embedded_resource`.
pub struct EmbeddedResource;
impl Tool for EmbeddedResource {
    const NAME: &'static str = "test_embedded_resource";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        cx.add_content(json!({
            "type": "resource",
            "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }
        }));
        Ok(Summary { summary: "one embedded text resource".into() })
    }
}

/// `test_multiple_content_types`.
pub struct MultipleContentTypes;
impl Tool for MultipleContentTypes {
    const NAME: &'static str = "test_multiple_content_types";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        cx.add_content(json!({ "type": "text", "text": "Multiple content types test:" }));
        cx.add_content(image_block());
        cx.add_content(json!({
            "type": "resource",
            "resource": {
                "uri": "test://mixed-content-resource",
                "mimeType": "application/json",
                "text": "{\"test\":\"data\",\"value\":123}"
            }
        }));
        Ok(Summary { summary: "text, image and resource".into() })
    }
}

/// `test_tool_with_logging`.
pub struct WithLogging;
impl Tool for WithLogging {
    const NAME: &'static str = "test_tool_with_logging";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        cx.log(LogLevel::Info, "Tool execution started");
        sleep_ms(50);
        cx.log(LogLevel::Info, "Tool processing data");
        sleep_ms(50);
        cx.log(LogLevel::Info, "Tool execution completed");
        text(cx, "Logging test completed: sent 3 log messages")
    }
}

/// `test_tool_with_progress`.
pub struct WithProgress;
impl Tool for WithProgress {
    const NAME: &'static str = "test_tool_with_progress";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        for (i, step) in [0.0, 50.0, 100.0].into_iter().enumerate() {
            if i > 0 {
                sleep_ms(50);
            }
            if cx.is_cancelled() {
                return Err(ToolError::new(quiver_abi::ErrorCode::CANCELLED, "cancelled by the caller"));
            }
            cx.progress(step, Some(100.0), &format!("step {} of 3", i + 1));
        }
        text(cx, "Progress test completed: reported 0, 50 and 100 out of 100")
    }
}

/// `test_error_handling`.
pub struct ErrorHandling;
impl Tool for ErrorHandling {
    const NAME: &'static str = "test_error_handling";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, _cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        Err(ToolError::tool("This tool intentionally returns an error for testing"))
    }
}

/// Arguments of `test_sampling`.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SamplingArgs {
    /// The prompt to send to the client's model.
    pub prompt: String,
}

/// `test_sampling`.
pub struct Sampling;
impl Tool for Sampling {
    const NAME: &'static str = "test_sampling";
    type Input = SamplingArgs;
    type Output = Summary;
    fn call(&self, input: SamplingArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        let answer = cx.sample(json!({
            "messages": [{ "role": "user", "content": { "type": "text", "text": input.prompt } }],
            "maxTokens": 100
        }))?;
        let reply = match &answer["content"] {
            Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(""),
            block => block["text"].as_str().unwrap_or_default().to_owned(),
        };
        text(cx, format!("LLM response: {reply}"))
    }
}

/// Arguments of `test_elicitation`.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ElicitationArgs {
    /// The message shown to the user.
    pub message: String,
}

fn elicit(cx: &mut Context<'_>, message: &str, schema: Value) -> Result<Summary, ToolError> {
    let answer = cx.elicit(message, schema)?;
    let action = answer["action"].as_str().unwrap_or("unknown");
    let content = answer.get("content").cloned().unwrap_or(Value::Null);
    text(cx, format!("Elicitation completed: action={action}, content={content}"))
}

/// `test_elicitation`.
pub struct Elicitation;
impl Tool for Elicitation {
    const NAME: &'static str = "test_elicitation";
    type Input = ElicitationArgs;
    type Output = Summary;
    fn call(&self, input: ElicitationArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        let answer = cx.elicit(
            &input.message,
            json!({
                "type": "object",
                "properties": {
                    "username": { "type": "string", "description": "User's response" },
                    "email": { "type": "string", "description": "User's email address" }
                },
                "required": ["username", "email"]
            }),
        )?;
        let action = answer["action"].as_str().unwrap_or("unknown");
        let content = answer.get("content").cloned().unwrap_or(Value::Null);
        text(cx, format!("User response: action={action}, content={content}"))
    }
}

/// `test_elicitation_sep1034_defaults`.
pub struct ElicitationDefaults;
impl Tool for ElicitationDefaults {
    const NAME: &'static str = "test_elicitation_sep1034_defaults";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        elicit(
            cx,
            "Please review and update the form fields with defaults",
            json!({
                "type": "object",
                "properties": {
                    "name": { "type": "string", "description": "User name", "default": "John Doe" },
                    "age": { "type": "integer", "description": "User age", "default": 30 },
                    "score": { "type": "number", "description": "User score", "default": 95.5 },
                    "status": {
                        "type": "string",
                        "description": "User status",
                        "enum": ["active", "inactive", "pending"],
                        "default": "active"
                    },
                    "verified": { "type": "boolean", "description": "Verification status", "default": true }
                },
                "required": []
            }),
        )
    }
}

/// `test_elicitation_sep1330_enums`.
pub struct ElicitationEnums;
impl Tool for ElicitationEnums {
    const NAME: &'static str = "test_elicitation_sep1330_enums";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        elicit(
            cx,
            "Please choose from the enum fields",
            json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {
                        "type": "string",
                        "description": "Untitled single-select",
                        "enum": ["option1", "option2", "option3"]
                    },
                    "titledSingle": {
                        "type": "string",
                        "description": "Titled single-select",
                        "oneOf": [
                            { "const": "value1", "title": "First Option" },
                            { "const": "value2", "title": "Second Option" },
                            { "const": "value3", "title": "Third Option" }
                        ]
                    },
                    "legacyEnum": {
                        "type": "string",
                        "description": "Legacy titled enum",
                        "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]
                    },
                    "untitledMulti": {
                        "type": "array",
                        "description": "Untitled multi-select",
                        "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
                    },
                    "titledMulti": {
                        "type": "array",
                        "description": "Titled multi-select",
                        "items": {
                            "anyOf": [
                                { "const": "value1", "title": "First Choice" },
                                { "const": "value2", "title": "Second Choice" },
                                { "const": "value3", "title": "Third Choice" }
                            ]
                        }
                    }
                },
                "required": []
            }),
        )
    }
}

/// `test_reconnection`.
pub struct Reconnection;
impl Tool for Reconnection {
    const NAME: &'static str = "test_reconnection";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        text(cx, "Reconnection test completed successfully")
    }
}

/// `json_schema_2020_12_tool`: its input schema is written in `tool.yaml` (the SDK's derived
/// schemas drop `$schema`, which the suite checks is preserved).
pub struct JsonSchema202012;
impl Tool for JsonSchema202012 {
    const NAME: &'static str = "json_schema_2020_12_tool";
    type Input = Value;
    type Output = Summary;
    fn call(&self, input: Value, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        text(cx, format!("Received: {input}"))
    }
}

/// Arguments of `test_deferred_echo`.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct EchoArgs {
    /// Text to return.
    pub text: String,
}

/// `test_deferred_echo`: not called by the suite; a deferred tool for Quiver's own MCP tests.
pub struct DeferredEcho;
impl Tool for DeferredEcho {
    const NAME: &'static str = "test_deferred_echo";
    type Input = EchoArgs;
    type Output = Summary;
    fn call(&self, input: EchoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        text(cx, input.text)
    }
}

/// `test_confirmed_write`: not called by the suite; needs confirmation (Quiver's approval tests).
pub struct ConfirmedWrite;
impl Tool for ConfirmedWrite {
    const NAME: &'static str = "test_confirmed_write";
    type Input = NoArgs;
    type Output = Summary;
    fn call(&self, _: NoArgs, cx: &mut Context<'_>) -> Result<Summary, ToolError> {
        let confirmed = cx.confirmed();
        text(cx, format!("confirmed: {confirmed}"))
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [
        SimpleText,
        ImageContent,
        AudioContent,
        EmbeddedResource,
        MultipleContentTypes,
        WithLogging,
        WithProgress,
        ErrorHandling,
        Sampling,
        Elicitation,
        ElicitationDefaults,
        ElicitationEnums,
        Reconnection,
        JsonSchema202012,
        DeferredEcho,
        ConfirmedWrite,
    ],
}

#[cfg(test)]
mod tests {
    use quiver_abi::{Status, ToolRequest, sdk::Host};

    fn call(tool: &str, inputs: quiver_abi::serde_json::Value) -> quiver_abi::ToolResponse {
        let request = ToolRequest { tool_id: tool.into(), inputs, ..ToolRequest::default() };
        super::__quiver_plugin::registry().call(tool, request, Host::Detached)
    }

    #[test]
    fn content_tools_return_their_blocks() {
        let r = call("test_multiple_content_types", quiver_abi::serde_json::json!({}));
        assert_eq!(r.status, Status::Ok);
        let kinds: Vec<&str> = r.content.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["text", "image", "resource"]);
        let r = call("test_simple_text", quiver_abi::serde_json::json!({}));
        assert_eq!(r.content[0]["text"], "This is a simple text response for testing.");
    }

    #[test]
    fn error_tool_fails_and_detached_sampling_is_refused() {
        let r = call("test_error_handling", quiver_abi::serde_json::json!({}));
        assert_eq!(r.status, Status::Error);
        let r = call("test_sampling", quiver_abi::serde_json::json!({"prompt": "hi"}));
        assert_eq!(r.status, Status::Error);
    }
}

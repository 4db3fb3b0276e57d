//! The plugin author's side: write a [`Tool`], list it in [`crate::export_plugin!`], done.
//!
//! ```text
//! use quiver_abi::{Context, Tool, ToolError, schemars::JsonSchema, serde::{Deserialize, Serialize}};
//!
//! // The `crate = ...` attributes let the derives work with `quiver-abi` as the only dependency.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(crate = "quiver_abi::serde")]
//! #[schemars(crate = "quiver_abi::schemars")]
//! struct Input { text: String }
//! #[derive(Serialize, JsonSchema)]
//! #[serde(crate = "quiver_abi::serde")]
//! #[schemars(crate = "quiver_abi::schemars")]
//! struct Output { length: usize }
//!
//! struct Length;
//! impl Tool for Length {
//!     const NAME: &'static str = "text_length";
//!     type Input = Input;
//!     type Output = Output;
//!     fn call(&self, input: Input, _cx: &mut Context<'_>) -> Result<Output, ToolError> {
//!         Ok(Output { length: input.text.chars().count() })
//!     }
//! }
//!
//! quiver_abi::export_plugin! { manifest: include_str!("../tool.yaml"), tools: [Length] }
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};

use abi_stable::std_types::{RResult, RStr, RString};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::{
    ABI_VERSION, AgentContext, CallHandle, ErrorCode, HostServicesRef, InvocationPolicies, LogLevel, PluginInfo,
    Secrets, Status, ToolError, ToolRequest, ToolResponse, ToolSchemas, contract::MemoryWrite,
};

/// A tool: a typed Rust function with serde input and output types whose JSON Schemas are
/// derived with `schemars`.
pub trait Tool: Send + Sync + 'static {
    /// The plugin-local tool name; must match a `tools[].name` in the plugin's `tool.yaml`.
    const NAME: &'static str;
    /// Arguments, deserialized from the validated call arguments.
    type Input: DeserializeOwned + JsonSchema;
    /// The structured result.
    type Output: Serialize + JsonSchema;
    /// Runs the tool. Return `Err` for failures the model should see; a panic is caught and
    /// reported as a `panic` error, but prefer errors.
    fn call(&self, input: Self::Input, cx: &mut Context<'_>) -> Result<Self::Output, ToolError>;
}

/// A tool with its types erased, as stored in the plugin's registry.
#[doc(hidden)]
pub trait DynTool: Send + Sync {
    fn name(&self) -> &'static str;
    fn schemas(&self) -> ToolSchemas;
    fn invoke(&self, inputs: Value, cx: &mut Context<'_>) -> Result<Value, ToolError>;
    /// [`DynTool::invoke`] on the arguments' JSON text, answering the output's JSON text: no
    /// `Value` in between for a tool without actions.
    fn invoke_text(&self, inputs: &str, cx: &mut Context<'_>) -> Result<Box<RawValue>, ToolError>;
}

struct Erased<T> {
    tool: T,
    /// True when the input is an [`crate::actions!`] enum (so a host-named action is filled in).
    has_actions: bool,
}

impl<T: Tool> DynTool for Erased<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn schemas(&self) -> ToolSchemas {
        let (input_schema, actions) = crate::actions::split_actions(raw_schema_of::<T::Input>());
        ToolSchemas { name: T::NAME.to_owned(), input_schema, output_schema: schema_of::<T::Output>(), actions }
    }
    fn invoke(&self, mut inputs: Value, cx: &mut Context<'_>) -> Result<Value, ToolError> {
        if self.has_actions
            && let Some(action) = cx.action()
        {
            crate::actions::apply_host_action(&mut inputs, action)?;
        }
        let input = serde_json::from_value(inputs).map_err(|e| self.unreadable(e))?;
        let output = self.tool.call(input, cx)?;
        serde_json::to_value(output).map_err(unserializable::<T>)
    }
    fn invoke_text(&self, inputs: &str, cx: &mut Context<'_>) -> Result<Box<RawValue>, ToolError> {
        if self.has_actions {
            // The host-named action is filled into the arguments as a value.
            let inputs = serde_json::from_str(inputs).map_err(|e| self.unreadable(e))?;
            let outputs = self.invoke(inputs, cx)?;
            return serde_json::value::to_raw_value(&outputs).map_err(unserializable::<T>);
        }
        let input = serde_json::from_str(inputs).map_err(|e| self.unreadable(e))?;
        let output = self.tool.call(input, cx)?;
        serde_json::value::to_raw_value(&output).map_err(unserializable::<T>)
    }
}

impl<T: Tool> Erased<T> {
    fn unreadable(&self, e: serde_json::Error) -> ToolError {
        if self.has_actions {
            ToolError::invalid(format!("arguments of `{}`: {e}", T::NAME))
        } else {
            ToolError::invalid(format!("arguments of `{}` do not match its input type: {e}", T::NAME))
        }
    }
}

fn unserializable<T: Tool>(e: serde_json::Error) -> ToolError {
    ToolError::new(ErrorCode::PROTOCOL, format!("`{}` produced unserializable output: {e}", T::NAME))
}

/// A [`ToolRequest`] as the exported `invoke` reads it: the arguments stay JSON text (borrowed
/// from the request), read once, straight into the tool's input type. The same fields and
/// defaults as [`ToolRequest`] (a test holds the two together).
#[derive(Deserialize)]
struct Incoming<'a> {
    request_id: String,
    tool_id: String,
    tool_version: String,
    timestamp: u64,
    #[serde(default)]
    agent_context: AgentContext,
    #[serde(default, borrow)]
    inputs: Option<&'a RawValue>,
    #[serde(default)]
    invocation_policies: InvocationPolicies,
    #[serde(default)]
    config: Value,
    #[serde(default)]
    memory_snippet: Option<String>,
    #[serde(default)]
    secrets: Secrets,
}

impl<'a> Incoming<'a> {
    /// The request (its `inputs` null, as a tool's [`Context::request`] has always shown it)
    /// and the arguments' text (`null` when absent, as `inputs` defaults to).
    fn split(self) -> (ToolRequest, &'a str) {
        let Incoming {
            request_id,
            tool_id,
            tool_version,
            timestamp,
            agent_context,
            inputs,
            invocation_policies,
            config,
            memory_snippet,
            secrets,
        } = self;
        let request = ToolRequest {
            request_id,
            tool_id,
            tool_version,
            timestamp,
            agent_context,
            inputs: Value::Null,
            invocation_policies,
            config,
            memory_snippet,
            secrets,
        };
        (request, inputs.map_or("null", RawValue::get))
    }
}

/// A successful [`ToolResponse`] as the exported `invoke` writes it: the output's JSON text
/// goes in as it is. The same fields and rules as [`ToolResponse`] (a test holds the two
/// together).
#[derive(Serialize)]
struct Answer<'a> {
    status: Status,
    outputs: &'a RawValue,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    content: &'a [Value],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    observations: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    memory_writes: &'a [MemoryWrite],
    #[serde(skip_serializing_if = "Map::is_empty")]
    telemetry: &'a Map<String, Value>,
}

/// Boxes a tool for the registry (used by [`crate::export_plugin!`]).
#[doc(hidden)]
pub fn erase<T: Tool>(tool: T) -> Box<dyn DynTool> {
    let has_actions = !crate::actions::split_actions(raw_schema_of::<T::Input>()).1.is_empty();
    Box::new(Erased { tool, has_actions })
}

/// The JSON Schema (2020-12) of a type, as the SDK derives it: `$schema` and the Rust type's
/// `title` are dropped, so the schema shown to a model carries only what it needs. For an
/// [`crate::actions!`] enum this is the flat schema a model sees (the per-action schemas are in
/// [`ToolSchemas::actions`]).
pub fn schema_of<T: JsonSchema>() -> Value {
    crate::actions::split_actions(raw_schema_of::<T>()).0
}

fn raw_schema_of<T: JsonSchema>() -> Value {
    let mut v = schemars::SchemaGenerator::default().into_root_schema_for::<T>().to_value();
    if let Value::Object(m) = &mut v {
        m.remove("$schema");
        m.remove("title");
    }
    v
}

/// The tools of one plugin plus its embedded manifest.
#[doc(hidden)]
pub struct Registry {
    manifest: &'static str,
    tools: Vec<Box<dyn DynTool>>,
}

impl Registry {
    pub fn new(manifest: &'static str, tools: Vec<Box<dyn DynTool>>) -> Registry {
        Registry { manifest, tools }
    }

    fn info(&self) -> PluginInfo {
        PluginInfo {
            abi_version: ABI_VERSION,
            sdk_version: crate::SDK_VERSION.to_owned(),
            manifest: self.manifest.to_owned(),
            tools: self.tools.iter().map(|t| t.schemas()).collect(),
        }
    }

    /// Runs one call (in-process, no ABI); used by the exported `invoke` and by plugin tests.
    pub fn call(&self, tool: &str, mut request: ToolRequest, host: Host) -> ToolResponse {
        let Some(t) = self.tools.iter().find(|t| t.name() == tool) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
            return ToolResponse::error(ToolError::new(
                ErrorCode::UNKNOWN_TOOL,
                format!("this plugin has no tool `{tool}` (it has: {})", known.join(", ")),
            ));
        };
        let inputs = std::mem::take(&mut request.inputs);
        let (result, gathered) = run_in_context(&request, host, |cx| t.invoke(inputs, cx));
        gathered.onto(match result {
            Ok(outputs) => ToolResponse::ok(outputs),
            Err(e) => ToolResponse::error(e),
        })
    }

    /// [`Registry::call`] on the request's JSON text, answering the response's JSON text (what
    /// the exported `invoke` does): the arguments are read straight into the tool's input type
    /// and the output written straight into the answer.
    pub fn call_text(&self, tool: &str, request: &str, host: Host) -> String {
        let incoming: Incoming<'_> = match serde_json::from_str(request) {
            Ok(r) => r,
            Err(e) => {
                return response_text(&ToolResponse::error(ToolError::new(
                    ErrorCode::PROTOCOL,
                    format!("the host sent a request this plugin cannot read: {e}"),
                )));
            }
        };
        let (request, inputs) = incoming.split();
        let Some(t) = self.tools.iter().find(|t| t.name() == tool) else {
            return response_text(&self.call(tool, request, host));
        };
        let (result, cx) = run_in_context(&request, host, |cx| t.invoke_text(inputs, cx));
        let outputs = match result {
            Ok(outputs) => outputs,
            Err(e) => return response_text(&cx.onto(ToolResponse::error(e))),
        };
        let answer = Answer {
            status: Status::Ok,
            outputs: &outputs,
            content: &cx.content,
            observations: &cx.observations,
            memory_writes: &cx.memory_writes,
            telemetry: &cx.telemetry,
        };
        match serde_json::to_string(&answer) {
            Ok(text) => text,
            Err(e) => response_text(&ToolResponse::error(ToolError::new(
                ErrorCode::PROTOCOL,
                format!("`{tool}` produced an unserializable answer: {e}"),
            ))),
        }
    }
}

/// What a tool handed its [`Context`] besides its result.
struct Gathered {
    observations: Vec<String>,
    memory_writes: Vec<MemoryWrite>,
    telemetry: Map<String, Value>,
    content: Vec<Value>,
}

impl Gathered {
    /// `response` carrying what the tool gathered.
    fn onto(self, response: ToolResponse) -> ToolResponse {
        let Gathered { observations, memory_writes, telemetry, content } = self;
        ToolResponse { observations, memory_writes, telemetry, content, ..response }
    }
}

/// Runs `f` with a fresh [`Context`] over `request`; its result and what the tool gathered.
fn run_in_context<R>(request: &ToolRequest, host: Host, f: impl FnOnce(&mut Context<'_>) -> R) -> (R, Gathered) {
    let mut cx = Context {
        host,
        request,
        observations: Vec::new(),
        memory_writes: Vec::new(),
        telemetry: Map::new(),
        content: Vec::new(),
    };
    let result = f(&mut cx);
    let Context { observations, memory_writes, telemetry, content, .. } = cx;
    (result, Gathered { observations, memory_writes, telemetry, content })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

fn response_text(response: &ToolResponse) -> String {
    match serde_json::to_string(response) {
        Ok(s) => s,
        Err(e) => format!(
            r#"{{"status":"error","error":{{"code":"protocol_error","message":"response not serializable: {}"}}}}"#,
            e.to_string().replace('"', "'")
        ),
    }
}

/// Body of the exported `invoke`: never unwinds.
#[doc(hidden)]
pub fn __invoke(
    registry: fn() -> &'static Registry,
    tool: RStr<'_>,
    request: RStr<'_>,
    host: HostServicesRef,
    call: CallHandle,
) -> RString {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        registry().call_text(tool.as_str(), request.as_str(), Host::Services { services: host, call })
    }));
    let text = outcome.unwrap_or_else(|payload| {
        response_text(&ToolResponse::error(ToolError::new(
            ErrorCode::PANIC,
            format!("tool `{}` panicked: {}", tool.as_str(), panic_message(payload.as_ref())),
        )))
    });
    RString::from(text)
}

/// Body of the exported `plugin_info`: never unwinds.
#[doc(hidden)]
pub fn __plugin_info(registry: fn() -> &'static Registry) -> RString {
    match catch_unwind(|| serde_json::to_string(&registry().info())) {
        Ok(Ok(s)) => RString::from(s),
        Ok(Err(e)) => {
            RString::from(format!(r#"{{"error":"plugin info not serializable: {}"}}"#, e.to_string().replace('"', "'")))
        }
        Err(p) => RString::from(format!(
            r#"{{"error":"plugin info panicked: {}"}}"#,
            panic_message(p.as_ref()).replace('"', "'")
        )),
    }
}

/// Where a call's host services go.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub enum Host {
    /// A real host, through the ABI.
    Services { services: HostServicesRef, call: CallHandle },
    /// No host (plugin unit tests): logs and progress are dropped, elicitation and sampling fail.
    Detached,
}

/// What a running tool can see and do besides its input.
pub struct Context<'a> {
    host: Host,
    request: &'a ToolRequest,
    observations: Vec<String>,
    memory_writes: Vec<MemoryWrite>,
    telemetry: Map<String, Value>,
    content: Vec<Value>,
}

impl<'a> Context<'a> {
    /// A context with no host, for unit tests of a tool.
    pub fn detached(request: &'a ToolRequest) -> Context<'a> {
        Context {
            host: Host::Detached,
            request,
            observations: Vec::new(),
            memory_writes: Vec::new(),
            telemetry: Map::new(),
            content: Vec::new(),
        }
    }

    /// The request being served (id, caller, policies, memory snippet).
    pub fn request(&self) -> &ToolRequest {
        self.request
    }

    /// The plugin's settings from the host configuration (`plugin_config.<plugin id>`); null when none.
    pub fn config(&self) -> &Value {
        &self.request.config
    }

    /// The value of secret `name`, when the tool declares it in its manifest (`secrets:`) and
    /// the operator supplied it. Never log it or put it in a result.
    pub fn secret(&self, name: &str) -> Option<&str> {
        self.request.secrets.get(name)
    }

    /// The consolidated-tool action of this call, if the tool has actions.
    pub fn action(&self) -> Option<&str> {
        self.request.invocation_policies.action.as_deref()
    }

    /// True when a person confirmed this call through the host's approval step.
    pub fn confirmed(&self) -> bool {
        self.request.invocation_policies.confirmed
    }

    /// Sends a log line to the host (and from there to the client).
    pub fn log(&self, level: LogLevel, message: &str) {
        if let Host::Services { services, call } = self.host {
            (services.log())(call, level as u8, RStr::from_str(message));
        }
    }

    /// Reports progress; `total` is optional.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        if let Host::Services { services, call } = self.host {
            (services.progress())(call, progress, total.unwrap_or(f64::NAN), RStr::from_str(message));
        }
    }

    /// True once the caller has cancelled the call or its deadline has passed: a long-running
    /// tool should check this and stop early.
    pub fn is_cancelled(&self) -> bool {
        match self.host {
            Host::Services { services, call } => (services.is_cancelled())(call),
            Host::Detached => false,
        }
    }

    /// Asks the user through the client. `message` is shown; `requested_schema` is a flat JSON
    /// Schema object of the fields wanted. Returns the client's answer:
    /// `{"action": "accept"|"decline"|"cancel", "content": {...}}`.
    pub fn elicit(&self, message: &str, requested_schema: Value) -> Result<Value, ToolError> {
        let request = serde_json::json!({ "message": message, "requestedSchema": requested_schema });
        self.host_json_call(|s| s.elicit(), &request, "elicitation")
    }

    /// Asks the client's model for a completion; `params` are MCP `sampling/createMessage`
    /// parameters; returns the client's result object.
    pub fn sample(&self, params: Value) -> Result<Value, ToolError> {
        self.host_json_call(|s| s.sample(), &params, "sampling")
    }

    fn host_json_call(
        &self,
        pick: impl FnOnce(HostServicesRef) -> extern "C" fn(CallHandle, RStr<'_>) -> RResult<RString, RString>,
        request: &Value,
        what: &str,
    ) -> Result<Value, ToolError> {
        let Host::Services { services, call } = self.host else {
            return Err(ToolError::tool(format!("{what} is not available: no host is attached")));
        };
        let body = request.to_string();
        match (pick(services))(call, RStr::from_str(&body)) {
            RResult::ROk(s) => serde_json::from_str(s.as_str()).map_err(|e| {
                ToolError::new(ErrorCode::PROTOCOL, format!("host sent an unreadable {what} result: {e}"))
            }),
            RResult::RErr(e) => Err(ToolError::tool(format!("{what} failed: {e}"))),
        }
    }

    /// Adds an observation (a note for the model) to the response.
    pub fn observe(&mut self, note: impl Into<String>) {
        self.observations.push(note.into());
    }

    /// Asks the host to remember a fact for later calls of this tool in this session (the host
    /// keeps it per session and tool; a `null` value forgets the key). The host bounds what it
    /// keeps (keys of at most 128 bytes, at most 4 KiB per tool and session): a write over the
    /// bound is refused and logged, and the previous value stays.
    pub fn remember(&mut self, key: impl Into<String>, value: Value) {
        self.memory_writes.push(MemoryWrite { key: key.into(), value });
    }

    /// A fact an earlier call of this tool remembered in this session ([`Context::remember`]),
    /// read from the request's `memory_snippet` (a JSON object of the remembered keys).
    pub fn recall(&self, key: &str) -> Option<Value> {
        let snippet = self.request.memory_snippet.as_deref()?;
        let mut all: serde_json::Map<String, Value> = serde_json::from_str(snippet).ok()?;
        all.remove(key)
    }

    /// Adds a content block for the client (MCP content-block shape: text, image, audio,
    /// resource); see [`crate::ToolResponse::content`].
    pub fn add_content(&mut self, block: Value) {
        self.content.push(block);
    }

    /// Records a tool-specific measurement in the response's telemetry.
    pub fn measure(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.telemetry.insert(key.into(), value.into());
    }
}

/// Exports a plugin: its embedded manifest and its tools.
///
/// ```text
/// quiver_abi::export_plugin! {
///     manifest: include_str!("../tool.yaml"),
///     tools: [ReadFile, ListDir::default()],
/// }
/// ```
/// This defines the library's `abi_stable` root module, whose functions never unwind.
#[macro_export]
macro_rules! export_plugin {
    (manifest: $manifest:expr, tools: [$($tool:expr),* $(,)?] $(,)?) => {
        #[doc(hidden)]
        #[allow(non_upper_case_globals, clippy::module_inception)]
        pub mod __quiver_plugin {
            #[allow(unused_imports)]
            use super::*;
            use $crate::abi_stable::std_types::{RStr, RString};

            static REGISTRY: ::std::sync::OnceLock<$crate::sdk::Registry> = ::std::sync::OnceLock::new();

            /// The plugin's registry (also usable from the plugin's own tests).
            pub fn registry() -> &'static $crate::sdk::Registry {
                REGISTRY.get_or_init(|| {
                    $crate::sdk::Registry::new($manifest, ::std::vec![$($crate::sdk::erase($tool)),*])
                })
            }

            extern "C" fn abi_version() -> u32 {
                $crate::ABI_VERSION
            }

            extern "C" fn plugin_info() -> RString {
                $crate::sdk::__plugin_info(registry)
            }

            extern "C" fn invoke(
                tool: RStr<'_>,
                request: RStr<'_>,
                host: $crate::HostServicesRef,
                call: $crate::CallHandle,
            ) -> RString {
                $crate::sdk::__invoke(registry, tool, request, host, call)
            }

            struct Statics;
            impl Statics {
                $crate::abi_stable::staticref! {
                    const MODULE: $crate::abi_stable::prefix_type::WithMetadata<$crate::PluginMod> =
                        $crate::abi_stable::prefix_type::WithMetadata::new($crate::PluginMod {
                            abi_version,
                            plugin_info,
                            invoke,
                        })
                }
            }

            fn root_module() -> $crate::PluginModRef {
                $crate::PluginModRef(Statics::MODULE.as_prefix())
            }

            // What `#[abi_stable::export_root_module]` expands to, written out so that plugins
            // need no direct dependency on `abi_stable`.
            #[unsafe(no_mangle)]
            pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::abi_stable::library::LibHeader = {
                extern "C" fn erased_module() -> $crate::abi_stable::library::RootModuleResult {
                    $crate::abi_stable::library::__call_root_module_loader(root_module)
                }
                // SAFETY: `erased_module` returns the root module of type `PluginModRef`, as
                // `from_constructor` requires.
                unsafe {
                    $crate::abi_stable::library::LibHeader::from_constructor::<$crate::PluginModRef>(
                        erased_module,
                        $crate::abi_stable::library::CheckTypeLayout::Yes,
                    )
                }
            };
        }
    };
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct In {
        n: i64,
    }
    #[derive(Serialize, JsonSchema)]
    struct Out {
        double: i64,
        note: String,
    }

    /// Doubles `n`, and uses every part of its context on the way.
    struct Double;
    impl Tool for Double {
        const NAME: &'static str = "double";
        type Input = In;
        type Output = Out;
        fn call(&self, input: In, cx: &mut Context<'_>) -> Result<Out, ToolError> {
            cx.observe("doubled");
            cx.measure("n", input.n);
            cx.remember("last", json!(input.n));
            cx.add_content(json!({"type": "text", "text": "two times"}));
            if input.n < 0 {
                return Err(ToolError::invalid("n must not be negative"));
            }
            let note = format!("{} for {}", cx.request().request_id, cx.config()["who"]);
            Ok(Out { double: input.n * 2, note })
        }
    }

    #[derive(Deserialize, JsonSchema)]
    struct CountArgs {
        #[serde(default)]
        by: i64,
    }
    crate::actions! {
        enum Counter {
            /// Counts up.
            #[action(name = "up", side_effects = "write")]
            Up(CountArgs),
        }
    }
    struct Count;
    impl Tool for Count {
        const NAME: &'static str = "count";
        type Input = Counter;
        type Output = Value;
        fn call(&self, input: Counter, _cx: &mut Context<'_>) -> Result<Value, ToolError> {
            let Counter::Up(args) = input;
            Ok(json!({"up": args.by}))
        }
    }

    fn full_request() -> ToolRequest {
        ToolRequest {
            request_id: "req-\"1\"".into(),
            tool_id: "double".into(),
            tool_version: "1.2.3".into(),
            timestamp: 1_700_000_000_000,
            agent_context: AgentContext {
                session_id: "s".into(),
                client: "c".into(),
                mode: "agent".into(),
                scopes: vec!["fs.read".into()],
            },
            inputs: json!({"n": 21}),
            invocation_policies: InvocationPolicies {
                timeout_ms: 5,
                max_result_bytes: 6,
                confirmed: true,
                action: Some("up".into()),
            },
            config: json!({"who": "me"}),
            memory_snippet: Some("{\"last\":1}".into()),
            secrets: Secrets([("k".to_owned(), "v".to_owned())].into()),
        }
    }

    #[test]
    fn the_text_path_reads_a_request_as_tool_request_does() {
        let full = serde_json::to_string(&full_request()).unwrap();
        let minimal = r#"{"request_id":"r","tool_id":"t","tool_version":"1","timestamp":0}"#;
        for text in [full.as_str(), minimal] {
            let mut expected: ToolRequest = serde_json::from_str(text).unwrap();
            let incoming: Incoming<'_> = serde_json::from_str(text).unwrap();
            let (request, inputs) = incoming.split();
            let inputs: Value = serde_json::from_str(inputs).unwrap();
            assert_eq!(inputs, std::mem::take(&mut expected.inputs), "{text}");
            assert_eq!(request, expected, "{text}");
        }
        // Both refuse a request without its essentials.
        let broken = r#"{"request_id":"r","timestamp":0}"#;
        assert!(serde_json::from_str::<ToolRequest>(broken).is_err());
        assert!(serde_json::from_str::<Incoming<'_>>(broken).is_err());
    }

    #[test]
    fn the_text_path_answers_what_the_value_path_answers() {
        let registry = Registry::new("", vec![erase(Double), erase(Count)]);
        let with = |tool: &str, inputs: Value, action: Option<&str>| {
            let mut r = full_request();
            r.tool_id = tool.into();
            r.inputs = inputs;
            r.invocation_policies.action = action.map(str::to_owned);
            r
        };
        let cases = [
            ("double", with("double", json!({"n": 21}), None)),
            ("double", with("double", json!({"n": -1}), None)),
            ("double", with("double", json!({"n": "x"}), None)),
            ("double", with("double", Value::Null, None)),
            ("count", with("count", json!({"by": 2}), Some("up"))),
            ("count", with("count", json!({"action": "up"}), None)),
            ("count", with("count", json!({"action": "down"}), None)),
            ("nope", with("nope", json!({}), None)),
        ];
        for (tool, request) in cases {
            let text = serde_json::to_string(&request).unwrap();
            let answer = registry.call_text(tool, &text, Host::Detached);
            let mut by_text: ToolResponse = serde_json::from_str(&answer).unwrap();
            let mut by_value = registry.call(tool, request, Host::Detached);
            // Reading text and reading a value place a type error differently ("at line 1
            // column 9"); everything before that is the same.
            if let (Some(a), Some(b)) = (&mut by_text.error, &mut by_value.error) {
                let cut = |m: &mut String| m.truncate(m.find(" at line ").unwrap_or(m.len()));
                cut(&mut a.message);
                cut(&mut b.message);
            }
            assert_eq!(by_text, by_value, "{tool}: {answer}");
        }
        // An ok answer carries what the tool gathered, in the contract's shape.
        let answer = registry.call_text("double", &serde_json::to_string(&full_request()).unwrap(), Host::Detached);
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap(),
            json!({"status": "ok", "outputs": {"double": 42, "note": "req-\"1\" for \"me\""},
                   "content": [{"type": "text", "text": "two times"}], "observations": ["doubled"],
                   "memory_writes": [{"key": "last", "value": 21}], "telemetry": {"n": 21}})
        );
        // A request the plugin cannot read is refused by name.
        let answer: ToolResponse = serde_json::from_str(&registry.call_text("double", "{", Host::Detached)).unwrap();
        assert!(answer.error.unwrap().message.starts_with("the host sent a request this plugin cannot read"));
    }
}

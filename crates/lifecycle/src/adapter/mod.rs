//! Declarative adapters at run time: the [`ToolBackend`] of a bundle whose tools run a command
//! ([`command`]) or make an HTTP request ([`http`]) as its signed manifest describes.
//!
//! The same [`Adapter`] runs in the host (isolation `in_process`) or inside a `quiver worker`
//! process after it entered the bundle's sandbox (isolation `process`): the host resolves what
//! needs the host's view ([`Resolved`]: the program's absolute path, the working folder, the
//! allow-listed environment values and header secrets) and the worker receives exactly that
//! with the verified manifest text.
//!
//! Invariants: an argument never reaches a shell (argv elements are passed to `execve` as they
//! are, one element per template); an argument never changes an HTTP request's scheme, host or
//! port (placeholders are percent-encoded, the built URL is checked against the base, redirects
//! are not followed, proxies are not used).

pub(crate) mod command;
pub(crate) mod http;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_abi::{ErrorCode, ToolError, ToolRequest, ToolResponse};
use quiver_catalog::{CallSink, Dispatch, Placement, ToolBackend};
use quiver_manifest::{AdapterSpec, InvokeSpec, Manifest, OutputFormat, Payload, SideEffects, Template};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Folders a bare program name is looked up in (never the host's `PATH`).
pub const PROGRAM_DIRS: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];

/// `PATH` given to a program unless the manifest passes the host's.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where the system's trusted certificates live; granted (read-only) with the name resolution
/// files: the HTTP client loads them when it is built, for https and plain http alike.
pub const TRUST_STORE_PATHS: &[&str] = &["/etc/ssl", "/etc/ca-certificates", "/usr/share/ca-certificates", "/etc/pki"];

/// Files name resolution reads; granted (read-only) to an isolated adapter that declares
/// `sandbox.network`.
pub const NAME_RESOLUTION_FILES: &[&str] =
    &["/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services"];

/// The self-description of an adapter bundle (what a library reports about itself): each
/// tool's declared input schema and its declared output schema or the one its `output`
/// implies.
pub fn plugin_info(manifest: &Manifest) -> quiver_abi::PluginInfo {
    quiver_abi::PluginInfo {
        abi_version: quiver_abi::ABI_VERSION,
        sdk_version: format!("adapter ({})", manifest.adapter.as_ref().map(|a| a.label()).unwrap_or("none")),
        manifest: String::new(),
        tools: manifest
            .tools
            .iter()
            .map(|t| quiver_abi::ToolSchemas {
                name: t.name.clone(),
                input_schema: t.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
                output_schema: t
                    .output_schema
                    .clone()
                    .unwrap_or_else(|| t.invoke.as_ref().map(|i| i.output).unwrap_or_default().default_output_schema()),
                actions: Vec::new(),
            })
            .collect(),
    }
}

/// Largest stdout or response body read; more is an error, never a silent cut.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// What the host resolves for an adapter before it runs (in the host or a worker).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// Command: the program's absolute, canonical path.
    pub program: Option<String>,
    /// Command: the folder it runs in.
    pub working_dir: String,
    /// Command: the environment given to the program.
    pub env: Vec<(String, String)>,
    /// HTTP: headers sent with every request (fixed and from the environment).
    pub headers: Vec<(String, String)>,
}

/// Resolves an adapter manifest against the host: the program (an absolute path, or a bare
/// name in [`PROGRAM_DIRS`]) must be an executable regular file; `env_headers` variables must
/// be set. `env` reads the host's environment.
pub fn resolve(
    manifest: &Manifest,
    working_dir: &Path,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Resolved, String> {
    let Some(adapter) = &manifest.adapter else {
        return Err("the manifest declares no adapter".into());
    };
    match adapter {
        AdapterSpec::Command(c) => {
            let candidates: Vec<PathBuf> = if c.program.starts_with('/') {
                vec![PathBuf::from(&c.program)]
            } else {
                PROGRAM_DIRS.iter().map(|d| Path::new(d).join(&c.program)).collect()
            };
            let found = candidates.iter().find_map(|p| {
                let real = std::fs::canonicalize(p).ok()?;
                let meta = std::fs::metadata(&real).ok()?;
                use std::os::unix::fs::PermissionsExt;
                (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(real)
            });
            let Some(program) = found else {
                return Err(format!(
                    "adapter.command.program: `{}` is not an executable file (looked at {}); install it (e.g. `apt-get install {}`) or write its absolute path",
                    c.program,
                    candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
                    c.program.rsplit('/').next().unwrap_or(&c.program)
                ));
            };
            // The name checked at signing may be a link to an interpreter (`/bin/rbash` is bash):
            // the code check again, with the program it really is.
            for (t, tool) in manifest.tools.iter().enumerate() {
                let args = tool.invoke.as_ref().map(|i| i.args.as_slice()).unwrap_or_default();
                if let Some((k, interpreter)) =
                    quiver_manifest::code_with_placeholder(&program.display().to_string(), args)
                {
                    return Err(format!(
                        "tools[{t}].invoke.args[{k}]: `{}` is {} (`{interpreter}`), and this argument is interpolated into code it runs, where it could run commands; keep the code fixed and pass arguments after it, or run the program directly",
                        c.program,
                        program.display()
                    ));
                }
            }
            let mut vars: Vec<(String, String)> = c.env.iter().filter_map(|k| env(k).map(|v| (k.clone(), v))).collect();
            if !c.env.iter().any(|k| k == "PATH") {
                vars.push(("PATH".into(), DEFAULT_PATH.into()));
            }
            let working_dir = c.working_dir.clone().unwrap_or_else(|| working_dir.display().to_string());
            Ok(Resolved { program: Some(program.display().to_string()), working_dir, env: vars, headers: Vec::new() })
        }
        AdapterSpec::Http(h) => {
            let mut headers: Vec<(String, String)> = h.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            for (name, var) in &h.env_headers {
                let value = env(var).ok_or_else(|| {
                    format!(
                        "adapter.http.env_headers.{name}: environment variable `{var}` is not set; set it for the host (it holds the header's secret value)"
                    )
                })?;
                headers.push((name.clone(), value));
            }
            Ok(Resolved { program: None, working_dir: working_dir.display().to_string(), env: Vec::new(), headers })
        }
    }
}

/// One tool's invocation, templates parsed once.
pub(crate) struct ToolPlan {
    pub invoke: InvokeSpec,
    /// The tool's name and risk when a call is not safe to repeat (it changes something and is
    /// not idempotent): a failure that may come after the other side acted is then not
    /// offered for a retry.
    pub unsafe_effect: Option<(String, SideEffects)>,
    pub args: Vec<Template>,
    pub path: Option<Template>,
    pub query: Vec<(String, Template)>,
    pub headers: Vec<(String, Template)>,
}

enum Kind {
    Command(command::CommandRunner),
    Http(http::HttpRunner),
}

/// The backend of an adapter bundle.
pub struct Adapter {
    plugin: String,
    kind: Kind,
    tools: HashMap<String, ToolPlan>,
    placement: Placement,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter").field("plugin", &self.plugin).finish_non_exhaustive()
    }
}

impl Adapter {
    /// Builds the runner of a verified adapter manifest with what the host resolved.
    pub fn new(manifest: &Manifest, resolved: Resolved, placement: Placement) -> Result<Adapter, String> {
        let parse = |t: &str| Template::parse(t);
        let mut tools = HashMap::new();
        for t in &manifest.tools {
            let Some(invoke) = t.invoke.clone() else {
                return Err(format!("tool `{}` has no `invoke`", t.name));
            };
            let plan = ToolPlan {
                args: invoke.args.iter().map(|a| parse(a)).collect::<Result<_, _>>()?,
                path: invoke.path.as_deref().map(parse).transpose()?,
                query: invoke.query.iter().map(|(k, v)| parse(v).map(|t| (k.clone(), t))).collect::<Result<_, _>>()?,
                headers: invoke
                    .headers
                    .iter()
                    .map(|(k, v)| parse(v).map(|t| (k.clone(), t)))
                    .collect::<Result<_, _>>()?,
                invoke,
                unsafe_effect: (!t.repeat_safe(None)).then(|| (t.name.clone(), t.side_effects)),
            };
            tools.insert(t.name.clone(), plan);
        }
        let kind = match &manifest.adapter {
            Some(AdapterSpec::Command(_)) => Kind::Command(command::CommandRunner::new(&resolved)?),
            Some(AdapterSpec::Http(h)) => Kind::Http(http::HttpRunner::new(h, &resolved)?),
            None => return Err("the manifest declares no adapter".into()),
        };
        Ok(Adapter { plugin: manifest.id.clone(), kind, tools, placement })
    }

    fn run(&self, tool: &str, request: &str, sink: &dyn CallSink) -> Result<Value, ToolError> {
        let request: ToolRequest = serde_json::from_str(request)
            .map_err(|e| ToolError::new(ErrorCode::PROTOCOL, format!("the host sent an unreadable request: {e}")))?;
        let plan = self.tools.get(tool).ok_or_else(|| {
            ToolError::new(ErrorCode::UNKNOWN_TOOL, format!("adapter `{}` has no tool `{tool}`", self.plugin))
        })?;
        let timeout = request.invocation_policies.timeout_ms;
        let deadline = Instant::now() + Duration::from_millis(if timeout == 0 { 30_000 } else { timeout });
        let args = if request.inputs.is_null() { json!({}) } else { request.inputs };
        match &self.kind {
            Kind::Command(r) => r.run(plan, &args, deadline, sink),
            Kind::Http(r) => r.run(plan, &args, &request.config, deadline, sink),
        }
    }
}

impl ToolBackend for Adapter {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        let response = match self.run(tool, request, &*sink) {
            Ok(outputs) => ToolResponse::ok(outputs),
            Err(e) => ToolResponse::error(e),
        };
        serde_json::to_string(&response).unwrap_or_else(|e| {
            format!(
                r#"{{"status":"error","error":{{"code":"protocol_error","message":"unserializable response: {e}"}}}}"#
            )
        })
    }

    fn dispatch(&self, _index: usize) -> Dispatch {
        Dispatch::Thread
    }

    fn placement(&self) -> Placement {
        self.placement.clone()
    }
}

/// The payload of a command's stdin or a request body.
pub(crate) fn payload(p: &Payload, args: &Value) -> (Vec<u8>, &'static str) {
    match p {
        Payload::Json => (args.to_string().into_bytes(), "application/json"),
        Payload::Argument(a) => {
            (args.get(a).map(quiver_manifest::value_text).unwrap_or_default().into_bytes(), "text/plain; charset=utf-8")
        }
    }
}

/// Turns output bytes into the tool's result as the tool's `output` says.
pub(crate) fn parse_output(format: OutputFormat, bytes: &[u8], what: &str) -> Result<Value, ToolError> {
    match format {
        OutputFormat::Text => Ok(json!({"text": String::from_utf8_lossy(bytes)})),
        OutputFormat::Json => {
            let text = std::str::from_utf8(bytes).map_err(|_| {
                ToolError::tool(format!("{what} is not UTF-8 text, so not JSON; declare `output: text`"))
            })?;
            let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
            let first = match values.next() {
                Some(Ok(v)) => v,
                Some(Err(e)) => {
                    return Err(ToolError::tool(format!("{what} is not JSON ({e}): `{}`", excerpt(text))));
                }
                None => return Err(ToolError::tool(format!("{what} is empty; expected one JSON value"))),
            };
            if values.next().is_some() {
                return Err(ToolError::tool(format!(
                    "{what} holds more than one JSON value; the tool must print exactly one (e.g. collect them into an array)"
                )));
            }
            Ok(json!({ "result": first }))
        }
    }
}

impl ToolPlan {
    /// The error of a failure that may come after the other side acted (a server error, a
    /// broken connection after the request was sent): retryable only when the call is safe to
    /// repeat; else not, and the message says why.
    pub(crate) fn maybe_acted(&self, e: ToolError) -> ToolError {
        match &self.unsafe_effect {
            None => e.retryable(),
            Some((tool, effect)) => quiver_catalog::not_safe_to_repeat(e, tool, *effect),
        }
    }
}

/// The error of a failed run: a mapped code, else `tool_error`.
pub(crate) fn mapped_error(invoke: &InvokeSpec, code: u16, message: String, retryable: bool) -> ToolError {
    let e = match invoke.errors.get(&code.to_string()) {
        Some(c) => ToolError::new(c.clone(), message),
        None => ToolError::tool(message),
    };
    if retryable { e.retryable() } else { e }
}

/// At most 400 characters of a text, for messages.
pub(crate) fn excerpt(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(400) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The placement of an adapter run in the host.
pub fn in_process_placement(label: &str) -> Placement {
    Placement { isolation: "in_process", detail: format!("{label} in the host process (trusted)") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(adapter: &str, extra: &str) -> Manifest {
        let y = format!(
            "manifest_version: 1\nid: demo\nversion: 0.1.0\ndisplay_name: Demo\ndescription: A demo.\nabi: 1\n{extra}adapter:\n{adapter}\ntools:\n  - name: demo_run\n    title: Run\n    description: Runs.\n    side_effects: read\n    input_schema: {{type: object, properties: {{q: {{type: string}}}}}}\n    invoke: {{}}\n"
        );
        Manifest::from_yaml(&y, "demo.tool.yaml").unwrap()
    }

    #[test]
    fn resolution_passes_only_the_allow_listed_environment_and_finds_the_program_in_fixed_folders() {
        let m = manifest("  command: {program: sh, env: [LANG, ABSENT]}", "");
        let env = |k: &str| match k {
            "LANG" => Some("C.UTF-8".to_owned()),
            "SECRET" => Some("s3cret".to_owned()),
            "PATH" => Some("/home/me/evil-bin".to_owned()),
            _ => None,
        };
        let r = resolve(&m, Path::new("/srv"), env).unwrap();
        // `sh` found in the fixed folders (never the host's PATH), canonicalized (`/usr/bin/dash`).
        let program = r.program.unwrap();
        assert!(PROGRAM_DIRS.iter().any(|d| program.starts_with(d)) && !program.contains("evil"), "{program}");
        assert_eq!(r.env, vec![("LANG".into(), "C.UTF-8".into()), ("PATH".into(), DEFAULT_PATH.into())]);
        assert_eq!(r.working_dir, "/srv");

        let e =
            resolve(&manifest("  command: {program: quiver-missing-program}", ""), Path::new("/"), env).unwrap_err();
        assert!(e.contains("adapter.command.program") && e.contains("/usr/bin/quiver-missing-program"), "{e}");

        let http = "  http: {base_url: \"http://127.0.0.1:1\", env_headers: {Authorization: API_TOKEN}}";
        let e = resolve(&manifest(http, "sandbox: {network: true}\n"), Path::new("/"), env).unwrap_err();
        assert!(e.contains("env_headers.Authorization") && e.contains("`API_TOKEN` is not set"), "{e}");
        let r = resolve(&manifest(http, "sandbox: {network: true}\n"), Path::new("/"), |k| {
            (k == "API_TOKEN").then(|| "Bearer t".to_owned())
        })
        .unwrap();
        assert_eq!(r.headers, vec![("Authorization".into(), "Bearer t".into())]);
    }

    /// A program whose name passed the signing check but that is an interpreter under another
    /// name (a link to a shell) is refused when the host resolves it, if a placeholder is in
    /// the code it would run.
    #[test]
    fn a_link_to_a_shell_under_another_name_is_refused_when_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("mytool");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let y = format!(
            "manifest_version: 1\nid: demo\nversion: 0.1.0\ndisplay_name: Demo\ndescription: A demo.\nabi: 1\nadapter:\n  command: {{program: \"{}\"}}\ntools:\n  - name: demo_run\n    title: Run\n    description: Runs.\n    side_effects: read\n    input_schema: {{type: object, properties: {{q: {{type: string}}}}}}\n    invoke: {{args: [\"-c\", \"echo {{q}}\"]}}\n",
            link.display()
        );
        let m = Manifest::from_yaml(&y, "demo.tool.yaml").expect("the name alone does not say it is a shell");
        let e = resolve(&m, Path::new("/"), |_| None).unwrap_err();
        assert!(e.contains("tools[0].invoke.args[1]") && e.contains("interpolated into code"), "{e}");
    }

    #[test]
    fn json_output_is_exactly_one_value() {
        assert_eq!(parse_output(OutputFormat::Json, b" {\"a\":1}\n", "out").unwrap(), json!({"result": {"a": 1}}));
        assert!(parse_output(OutputFormat::Json, b"1 2", "out").unwrap_err().message.contains("more than one"));
        assert!(parse_output(OutputFormat::Json, b"", "out").unwrap_err().message.contains("empty"));
        assert_eq!(parse_output(OutputFormat::Text, b"a\n", "out").unwrap(), json!({"text": "a\n"}));
    }
}

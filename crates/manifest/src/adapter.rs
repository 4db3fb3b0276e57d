//! Declarative adapters: a bundle whose tools run a command or make an HTTP request instead of
//! calling a native library. The model (`adapter:` at the top of a manifest, `invoke:` per
//! tool), the argument templates, and the rules a schema cannot express. No I/O: resolving the
//! program, spawning it and sending requests belong to `quiver-lifecycle`.
//!
//! Templates are strings with `{name}` placeholders (a top-level argument), `{*}` (the whole
//! arguments object as JSON) and `{{` / `}}` for literal braces. A command's `args` element is
//! rendered to exactly one argv element: never split, never given to a shell. An HTTP `path`
//! placeholder is percent-encoded as one path segment, a `query` value as one query value; the
//! scheme, host and port come only from the manifest (or the operator's configuration).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Issue, excerpt, field, index};

/// What a bundle's tools run (`adapter:` in the manifest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AdapterSpec {
    /// Each call runs a program.
    Command(CommandAdapter),
    /// Each call makes an HTTP request.
    Http(HttpAdapter),
}

impl AdapterSpec {
    /// `adapter:command` or `adapter:http`: the source label shown to operators.
    pub fn label(&self) -> &'static str {
        match self {
            AdapterSpec::Command(_) => "adapter:command",
            AdapterSpec::Http(_) => "adapter:http",
        }
    }
}

/// A command adapter: the program every tool of the bundle runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandAdapter {
    /// An absolute path, or a bare program name looked up (when the bundle loads) in
    /// `/usr/local/bin`, `/usr/bin` and `/bin`.
    pub program: String,
    /// The folder the program runs in (absolute); default: the host's working folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Names of host environment variables passed to the program (nothing else is; `PATH` is
    /// set to `/usr/local/bin:/usr/bin:/bin` unless listed here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
}

/// An HTTP adapter: the server every tool of the bundle talks to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpAdapter {
    /// `http://host[:port][/base/path]` or `https://...`: scheme, host and port of every
    /// request. No query, fragment or user info.
    pub base_url: String,
    /// A `plugin_config` string setting by which the operator may point the adapter at another
    /// server (same rules as `base_url`). Arguments never can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_setting: Option<String>,
    /// Headers sent with every request (fixed values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Headers whose value is read from a host environment variable (`Authorization:
    /// API_TOKEN`), so secrets are never written in the manifest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_headers: BTreeMap<String, String>,
}

/// How one tool of an adapter bundle is invoked (`invoke:` on a tool).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeSpec {
    /// Command: the argv after the program, one template per element.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Command: what the program reads on stdin (default: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<Payload>,
    /// HTTP: the method (default `GET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<HttpMethod>,
    /// HTTP: the path template after the base URL, starting with `/` (default `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// HTTP: query parameters (value templates); a parameter whose placeholders name an absent
    /// argument is left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// HTTP: headers of this tool (value templates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// HTTP: the request body (default: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Payload>,
    /// How stdout (command) or the response body (HTTP) becomes the result.
    #[serde(default)]
    pub output: OutputFormat,
    /// Exit codes (command) or statuses (HTTP) that are a success besides `0` / `2xx`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ok: Vec<u16>,
    /// Exit codes or statuses mapped to a tool error code (`"2": invalid_arguments`,
    /// `"404": not_found`); any other failure is `tool_error`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, String>,
}

/// What is sent as a command's stdin or an HTTP body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Payload {
    /// The whole arguments object as JSON.
    Json,
    /// The text of one string argument (JSON text for any other value).
    Argument(String),
}

/// HTTP methods an adapter may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET.
    #[default]
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl HttpMethod {
    /// The method name.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

/// How program output or a response body becomes the tool's result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputFormat {
    /// One JSON value: the result is `{"result": value}`.
    #[default]
    Json,
    /// UTF-8 text: the result is `{"text": "..."}`.
    Text,
}

impl OutputFormat {
    /// The output schema of a tool that declares none.
    pub fn default_output_schema(self) -> Value {
        match self {
            OutputFormat::Json => serde_json::json!({
                "type": "object",
                "properties": {"result": {"description": "The JSON value the tool produced."}},
                "required": ["result"]
            }),
            OutputFormat::Text => serde_json::json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text the tool produced."}},
                "required": ["text"]
            }),
        }
    }
}

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text.
    Text(String),
    /// A top-level argument.
    Arg(String),
    /// The whole arguments object as JSON (`{*}`).
    All,
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The pieces, in order.
    pub pieces: Vec<Piece>,
}

impl Template {
    /// Parses `{name}`, `{*}`, `{{` and `}}`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars().peekable();
        while let Some(ch) = chars.next() {
            match ch {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    lit.push('}');
                }
                '}' => return Err("a lone `}`; write `}}` for a literal brace".into()),
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => {
                                return Err(
                                    "an unclosed `{`; close the placeholder, or write `{{` for a literal brace".into(),
                                );
                            }
                        }
                    }
                    if !lit.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut lit)));
                    }
                    if name == "*" {
                        pieces.push(Piece::All);
                    } else if !name.is_empty()
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        pieces.push(Piece::Arg(name));
                    } else {
                        return Err(format!(
                            "`{{{}}}` is not a placeholder: name one top-level argument (`{{query}}`), write `{{*}}` for all arguments as JSON, or write `{{{{` and `}}}}` for literal braces",
                            excerpt(&name)
                        ));
                    }
                }
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Ok(Template { pieces })
    }

    /// The arguments the template names.
    pub fn args(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Arg(a) => Some(a.as_str()),
            _ => None,
        })
    }

    /// Renders with `args` (a JSON object): a string argument as its text, anything else as
    /// compact JSON, each value passed through `encode`. `None` when a named argument is
    /// absent or null (the caller leaves the element out).
    pub fn render(&self, args: &Value, encode: impl Fn(&str) -> String) -> Option<String> {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Arg(name) => match args.get(name) {
                    None | Some(Value::Null) => return None,
                    Some(v) => out.push_str(&encode(&value_text(v))),
                },
                Piece::All => out.push_str(&encode(&args.to_string())),
            }
        }
        Some(out)
    }
}

/// A string value's text, or any other value's compact JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Checks an adapter base URL: `http` or `https`, a host, no user info, query or fragment.
/// Returns the URL without a trailing `/`.
pub fn check_base_url(url: &str) -> Result<String, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("`{}` has no scheme; write `http://host:port` or `https://host`", excerpt(url)))?;
    if scheme != "http" && scheme != "https" {
        return Err(format!("scheme `{}` is not supported; use `http` or `https`", excerpt(scheme)));
    }
    if rest.contains(['?', '#']) {
        return Err("a base URL has no query or fragment; put query parameters under a tool's `invoke.query`".into());
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("`{}` names no host", excerpt(url)));
    }
    if authority.contains('@') {
        return Err("a base URL carries no user info; send credentials in `env_headers`".into());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '{' | '}')) {
        return Err("a base URL is a fixed URL: no spaces, control characters or placeholders".into());
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Error codes an adapter may map to, besides tool-specific `snake_case` codes.
fn is_error_code(s: &str) -> bool {
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The properties an input schema declares at its top level.
fn properties(schema: Option<&Value>) -> Vec<String> {
    schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// The semantic rules of an adapter manifest (also of a plugin manifest: no tool may have
/// `invoke` there). `tools` is each tool's (name, invoke, input schema), in manifest order.
pub(crate) fn adapter_issues(
    adapter: Option<&AdapterSpec>,
    has_artifact: bool,
    network: bool,
    tools: &[(String, Option<&InvokeSpec>, Option<&Value>)],
) -> Vec<Issue> {
    let mut issues = Vec::new();
    let mut push = |path: String, message: String, fix: &str| issues.push(Issue::new(path, message, fix));
    let Some(adapter) = adapter else {
        for (n, (name, invoke, _)) in tools.iter().enumerate() {
            if invoke.is_some() {
                push(
                    field(&index("tools", n), "invoke"),
                    format!("tool `{name}` has `invoke`, but the manifest declares no `adapter`"),
                    "add `adapter: {command: {program: ...}}` or `adapter: {http: {base_url: ...}}`, or remove `invoke` (a plugin library's tools are run by its code)",
                );
            }
        }
        return issues;
    };
    if has_artifact {
        push(
            "artifact".into(),
            "an adapter bundle has no library, so no `artifact`".into(),
            "remove `artifact` (the signature covers the manifest, which holds the whole adapter), or remove `adapter` for a plugin library",
        );
    }
    match adapter {
        AdapterSpec::Command(c) => {
            let p = &c.program;
            let bare = !p.contains('/');
            if p.is_empty() || !(bare || p.starts_with('/')) || p.contains('\0') || p.split('/').any(|s| s == "..") {
                push(
                    "adapter.command.program".into(),
                    format!("`{}` is neither an absolute path nor a bare program name", excerpt(p)),
                    "write an absolute path (`/usr/bin/jq`) or a program name found in /usr/local/bin, /usr/bin or /bin (`jq`)",
                );
            }
            if let Some(w) = &c.working_dir
                && !w.starts_with('/')
            {
                push(
                    "adapter.command.working_dir".into(),
                    format!("`{}` is not an absolute path", excerpt(w)),
                    "write an absolute folder, or leave it out to run in the host's working folder",
                );
            }
            for (n, e) in c.env.iter().enumerate() {
                if e.is_empty() || e.contains(['=', '\0']) {
                    push(
                        index("adapter.command.env", n),
                        format!("`{}` is not an environment variable name", excerpt(e)),
                        "list variable names only (`LANG`), never values",
                    );
                }
            }
        }
        AdapterSpec::Http(h) => {
            if let Err(e) = check_base_url(&h.base_url) {
                push(
                    "adapter.http.base_url".into(),
                    e,
                    "write e.g. `http://127.0.0.1:8080` or `https://api.example.com/v1`",
                );
            }
            if !network {
                push(
                    "sandbox.network".into(),
                    "an HTTP adapter needs the network, but `sandbox.network` is not `true`".into(),
                    "add `sandbox: {network: true}` (isolated bundles are refused TCP otherwise)",
                );
            }
            for (name, value) in h.headers.iter().chain(h.env_headers.iter()) {
                if !is_header_name(name) || value.contains(['\r', '\n', '\0']) {
                    push(
                        field("adapter.http.headers", name),
                        format!("`{}` is not a valid header", excerpt(name)),
                        "use a token header name (`X-Api-Version`) and a value without line breaks",
                    );
                }
            }
        }
    }
    let is_http = matches!(adapter, AdapterSpec::Http(_));
    for (n, (name, invoke, input)) in tools.iter().enumerate() {
        let at = index("tools", n);
        let Some(invoke) = invoke else {
            push(
                field(&at, "invoke"),
                format!("tool `{name}` of an adapter bundle has no `invoke`"),
                if is_http {
                    "add `invoke: {method: GET, path: /things/{id}}`"
                } else {
                    "add `invoke: {args: [\"--flag\", \"{argument}\"]}`"
                },
            );
            continue;
        };
        if input.is_none() {
            push(
                field(&at, "input_schema"),
                format!("tool `{name}` of an adapter bundle declares no input_schema"),
                "declare the arguments as a JSON Schema object (there is no code to derive them from)",
            );
        }
        let props = properties(*input);
        let at_invoke = field(&at, "invoke");
        let mut templates: Vec<(String, &String)> = Vec::new();
        let wrong_kind = |k: &str| {
            if is_http {
                format!("`{k}` is for command adapters; this bundle's adapter is `http`")
            } else {
                format!("`{k}` is for HTTP adapters; this bundle's adapter is `command`")
            }
        };
        if is_http {
            if !invoke.args.is_empty() {
                push(
                    field(&at_invoke, "args"),
                    wrong_kind("args"),
                    "remove it; build the request with `path`, `query`, `headers` and `body`",
                );
            }
            if invoke.stdin.is_some() {
                push(field(&at_invoke, "stdin"), wrong_kind("stdin"), "remove it; use `body`");
            }
            if let Some(p) = &invoke.path {
                if !p.starts_with('/') {
                    push(
                        field(&at_invoke, "path"),
                        format!("`{}` does not start with `/`", excerpt(p)),
                        "write the path after the base URL, e.g. `/items/{id}`",
                    );
                }
                if p.contains(['?', '#']) {
                    push(
                        field(&at_invoke, "path"),
                        "a path has no query or fragment".into(),
                        "put query parameters under `query`",
                    );
                }
                templates.push((field(&at_invoke, "path"), p));
            }
            for (k, v) in &invoke.query {
                templates.push((field(&field(&at_invoke, "query"), k), v));
            }
            for (k, v) in &invoke.headers {
                if !is_header_name(k) {
                    push(
                        field(&field(&at_invoke, "headers"), k),
                        format!("`{}` is not a header name", excerpt(k)),
                        "use letters, digits and `-`",
                    );
                }
                templates.push((field(&field(&at_invoke, "headers"), k), v));
            }
        } else {
            for (k, set) in [
                ("method", invoke.method.is_some()),
                ("path", invoke.path.is_some()),
                ("query", !invoke.query.is_empty()),
                ("headers", !invoke.headers.is_empty()),
                ("body", invoke.body.is_some()),
            ] {
                if set {
                    push(
                        field(&at_invoke, k),
                        wrong_kind(k),
                        "remove it; build the command line with `args` and `stdin`",
                    );
                }
            }
            for (k, a) in invoke.args.iter().enumerate() {
                templates.push((index(&field(&at_invoke, "args"), k), a));
            }
            if let AdapterSpec::Command(c) = adapter
                && let Some((k, interpreter)) = code_with_placeholder(&c.program, &invoke.args)
            {
                push(
                    index(&field(&at_invoke, "args"), k),
                    format!(
                        "an argument is interpolated into code that `{interpreter}` runs, where it could run commands"
                    ),
                    "keep the code fixed and pass arguments after it (a shell's positional parameters: `args: [\"-c\", \"jq -n --arg v \\\"$1\\\" ...\", \"sh\", \"{value}\"]`; a script's argv), or run the program directly",
                );
            }
        }
        for (path, text) in templates {
            match Template::parse(text) {
                Err(e) => push(
                    path,
                    e,
                    "a template takes `{name}` (one argument), `{*}` (all arguments as JSON) and `{{` `}}` (a literal brace)",
                ),
                Ok(t) => {
                    for a in t.args() {
                        if !props.iter().any(|p| p == a) {
                            push(
                                path.clone(),
                                format!("placeholder `{{{a}}}` names no property of the input_schema"),
                                "name a top-level property of `input_schema.properties`, or add it there",
                            );
                        }
                    }
                }
            }
        }
        for (key, payload) in [("stdin", &invoke.stdin), ("body", &invoke.body)] {
            if let Some(Payload::Argument(a)) = payload
                && !props.iter().any(|p| p == a)
            {
                push(
                    field(&at_invoke, key),
                    format!("argument `{}` is no property of the input_schema", excerpt(a)),
                    "name a top-level property of `input_schema.properties`",
                );
            }
        }
        for (code, target) in &invoke.errors {
            let numeric = code.parse::<u16>().is_ok();
            if !numeric {
                push(
                    field(&field(&at_invoke, "errors"), code),
                    format!("`{}` is not an exit code or HTTP status", excerpt(code)),
                    "use a number: an exit code (`2`) or a status (`404`)",
                );
            }
            if !is_error_code(target) {
                push(
                    field(&field(&at_invoke, "errors"), code),
                    format!("`{}` is not an error code", excerpt(target)),
                    "use a snake_case code such as `invalid_arguments`, `not_found` or `permission_denied`",
                );
            }
        }
    }
    issues
}

/// Shells, by their usual names (a restricted `r` form and a version suffix included).
const SHELLS: &[&str] =
    &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "oksh", "pdksh"];

/// Interpreters that run the argument after one of these flags as code.
const CODE_FLAGS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("pypy", &["-c"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("luajit", &["-e"]),
    ("rscript", &["-e"]),
    ("tclsh", &["-c"]),
    ("pwsh", &["-c", "-command"]),
];

/// Programs whose first program text is code when no file is given (`awk '{print}'`).
const AWKS: &[&str] = &["awk", "gawk", "mawk", "nawk", "busybox-awk"];

/// A program name as its file is called, lower-cased, without folders, a version suffix
/// (`python3.12` → `python`) or a shell's restricted `r` (`rbash` → `bash`).
fn interpreter_name(program: &str) -> String {
    let base = program.rsplit('/').next().unwrap_or(program).to_ascii_lowercase();
    let base = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    let unrestricted = base.strip_prefix('r').filter(|s| SHELLS.contains(s));
    unrestricted.unwrap_or(base).to_owned()
}

/// Whether `text` holds a placeholder.
fn has_placeholder(text: &str) -> bool {
    Template::parse(text).is_ok_and(|t| t.pieces.iter().any(|p| !matches!(p, Piece::Text(_))))
}

/// The element of `args` (its index) that is code an interpreter runs and holds a placeholder,
/// with the interpreter's name; `None` when there is none. Every element of the command line
/// that names an interpreter counts, not only the program, so wrappers (`env`, `nice`,
/// `timeout`, `busybox`, `sudo`) do not hide one; `env -S` splits its argument into a command
/// line, so a placeholder there counts too. The check is by name: what cannot be told from the
/// command line (a script that `eval`s its own arguments) is the author's to get right, and
/// the signature vouches for it. The host checks the program's real name again when it
/// resolves it (a link named otherwise).
pub fn code_with_placeholder(program: &str, args: &[String]) -> Option<(usize, String)> {
    // The program is element 0 of the line; `args[k]` is element k + 1.
    let line: Vec<&str> = std::iter::once(program).chain(args.iter().map(String::as_str)).collect();
    for (i, element) in line.iter().enumerate() {
        let name = interpreter_name(element);
        let after = || line.iter().enumerate().skip(i + 1);
        let code_at = |flags: &dyn Fn(&str) -> bool| {
            after()
                .find(|(_, a)| flags(a))
                .map(|(j, _)| j + 1)
                .filter(|&j| line.get(j).is_some_and(|c| has_placeholder(c)))
        };
        let found = if SHELLS.contains(&name.as_str()) {
            code_at(&|a: &str| a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
        } else if let Some((_, flags)) = CODE_FLAGS.iter().find(|(n, _)| *n == name) {
            code_at(&|a: &str| flags.contains(&a.to_ascii_lowercase().as_str()))
        } else if AWKS.contains(&name.as_str()) {
            // The first element that is neither an option nor an option's value is the program
            // text (unless `-f` names a file).
            let mut j = i + 1;
            let mut program_text = None;
            while let Some(a) = line.get(j) {
                match *a {
                    "-f" | "--file" => break,
                    "-v" | "-F" | "--assign" | "--field-separator" => j += 2,
                    a if a.starts_with('-') && a.len() > 1 => j += 1,
                    _ => {
                        program_text = Some(j);
                        break;
                    }
                }
            }
            program_text.filter(|&j| has_placeholder(line[j]))
        } else if name == "env" {
            code_at(&|a: &str| a == "-S" || a.starts_with("--split-string"))
        } else {
            None
        };
        if let Some(j) = found {
            return Some((j - 1, name));
        }
    }
    None
}

fn is_header_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_parse_placeholders_and_literal_braces() {
        let t = Template::parse("--arg={name}{{x}}{*}").unwrap();
        assert_eq!(
            t.pieces,
            vec![Piece::Text("--arg=".into()), Piece::Arg("name".into()), Piece::Text("{x}".into()), Piece::All]
        );
        assert_eq!(
            t.render(&json!({"name": "a b", "n": 1}), str::to_owned).as_deref(),
            Some(r#"--arg=a b{x}{"n":1,"name":"a b"}"#)
        );
        assert!(t.render(&json!({}), str::to_owned).is_none(), "absent argument leaves the element out");
        assert!(Template::parse("{unclosed").unwrap_err().contains("unclosed"));
        assert!(Template::parse("{a b}").unwrap_err().contains("is not a placeholder"));
        assert!(Template::parse("x}").unwrap_err().contains("lone"));
    }

    #[test]
    fn base_urls_fix_scheme_host_and_port() {
        assert_eq!(check_base_url("http://127.0.0.1:8080/").unwrap(), "http://127.0.0.1:8080");
        assert!(check_base_url("ftp://x").unwrap_err().contains("not supported"));
        assert!(check_base_url("http://u:p@x").unwrap_err().contains("user info"));
        assert!(check_base_url("http://x/?a=1").unwrap_err().contains("query"));
        assert!(check_base_url("http://x/{host}").unwrap_err().contains("placeholders"));
        assert!(check_base_url("x").unwrap_err().contains("no scheme"));
    }

    fn manifest(adapter: &str, invoke: &str, extra: &str) -> Result<crate::Manifest, crate::ManifestError> {
        let y = format!(
            "manifest_version: 1\nid: demo\nversion: 0.1.0\ndisplay_name: Demo\ndescription: A demo.\nabi: 1\n{extra}adapter:\n{adapter}\ntools:\n  - name: demo_run\n    title: Run\n    description: Runs.\n    side_effects: read\n    input_schema: {{type: object, properties: {{q: {{type: string}}}}}}\n{invoke}\n"
        );
        crate::Manifest::from_yaml(&y, "demo.tool.yaml")
    }

    /// A placeholder that would become code run by an interpreter is refused however the
    /// interpreter is reached: a shell by another name (`rbash`), behind a wrapper (`env`,
    /// `nice`, `timeout`, `busybox`), `env -S`, and the other usual interpreters' code flags.
    #[test]
    fn placeholders_in_code_an_interpreter_runs_are_refused_behind_wrappers_too() {
        let refused = [
            ("env", r#"["sh", "-c", "echo {q}"]"#, 2),
            ("rbash", r#"["-c", "echo {q}"]"#, 1),
            ("/usr/bin/busybox", r#"["sh", "-c", "echo {q}"]"#, 2),
            ("nice", r#"["-n", "5", "bash", "-lc", "echo {q}"]"#, 4),
            ("timeout", r#"["5", "/bin/dash", "-c", "x {q}"]"#, 3),
            ("env", r#"["-S", "sh -c {q}"]"#, 1),
            ("python3", r#"["-c", "print({q})"]"#, 1),
            ("perl", r#"["-e", "{q}"]"#, 1),
            ("node", r#"["--eval", "{q}"]"#, 1),
            ("ruby", r#"["-e", "puts {q}"]"#, 1),
            ("awk", r#"["{q}"]"#, 0),
        ];
        for (program, args, at) in refused {
            let e = manifest(
                &format!("  command: {{program: \"{program}\"}}"),
                &format!("    invoke: {{args: {args}}}"),
                "",
            )
            .map(|_| ())
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!(
                    "tools[0].invoke.args[{at}] (tool `demo_run`): an argument is interpolated into code"
                )),
                "{program} {args}: {e}"
            );
        }
        let allowed = [
            ("sh", r#"["-c", "echo \"$1\"", "sh", "{q}"]"#),
            ("python3", r#"["/opt/tool.py", "{q}"]"#),
            ("env", r#"["jq", "-n", "{q}"]"#),
            ("awk", r#"["-v", "x={q}", "{{print x}}"]"#),
            ("git", r#"["commit", "-m", "{q}"]"#),
        ];
        for (program, args) in allowed {
            let m = manifest(
                &format!("  command: {{program: \"{program}\"}}"),
                &format!("    invoke: {{args: {args}}}"),
                "",
            );
            assert!(m.is_ok(), "{program} {args}: {m:?}");
        }
    }

    /// Literal braces in a fixed argument (`echo '{}'`) are refused with how to write them,
    /// not a fix that only says to fix the template.
    #[test]
    fn literal_braces_in_a_template_are_refused_with_how_to_write_them() {
        let e = manifest("  command: {program: sh}", "    invoke: {args: [\"-c\", \"echo '{}'\"]}", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tools[0].invoke.args[1] (tool `demo_run`): `{}` is not a placeholder"), "{e}");
        assert!(e.contains("`{{` and `}}`"), "{e}");
        assert!(!e.contains("fix the template"), "{e}");
        let ok = manifest("  command: {program: sh}", "    invoke: {args: [\"-c\", \"echo '{{}}'\"]}", "");
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn adapter_manifests_are_checked_with_errors_naming_the_field() {
        let ok =
            manifest("  command: {program: jq}", "    invoke: {args: [\"-n\", \"{q}\"], stdin: json}", "").unwrap();
        assert!(matches!(ok.adapter, Some(AdapterSpec::Command(_))));
        assert_eq!(ok.tools[0].invoke.as_ref().unwrap().stdin, Some(Payload::Json));

        let e = manifest("  command: {program: jq}", "    invoke: {args: [\"{nope}\"]}", "").unwrap_err().to_string();
        assert!(e.contains("tools[0].invoke.args[0] (tool `demo_run`): placeholder `{nope}` names no property"), "{e}");
        let e = manifest("  command: {program: ./jq}", "    invoke: {method: GET}", "").unwrap_err().to_string();
        assert!(
            e.contains("adapter.command.program")
                && e.contains("tools[0].invoke.method (tool `demo_run`): `method` is for HTTP adapters"),
            "{e}"
        );
        let e = manifest("  http: {base_url: \"http://127.0.0.1:1\"}", "    invoke: {path: \"/x/{q}\"}", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sandbox.network") && e.contains("sandbox: {network: true}"), "{e}");
        let http = manifest(
            "  http: {base_url: \"http://127.0.0.1:1\"}",
            "    invoke: {path: \"/x/{q}\", query: {a: \"{q}\"}}",
            "sandbox: {network: true}\n",
        );
        assert!(http.is_ok(), "{http:?}");
        let e = manifest("  command: {program: /bin/sh}", "    invoke: {args: [\"-c\", \"echo {q}\"]}", "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "tools[0].invoke.args[1] (tool `demo_run`): an argument is interpolated into code that `sh` runs"
            ),
            "{e}"
        );
        assert!(
            manifest(
                "  command: {program: sh}",
                "    invoke: {args: [\"-c\", \"echo \\\"$1\\\"\", \"sh\", \"{q}\"]}",
                ""
            )
            .is_ok()
        );
        let e = manifest("  command: {program: jq}", "", "").unwrap_err().to_string();
        assert!(e.contains("tools[0].invoke: tool `demo_run` of an adapter bundle has no `invoke`"), "{e}");
    }
}

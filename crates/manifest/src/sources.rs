//! The `sources` section of `quiver.yaml`: upstream MCP servers whose tools Quiver serves
//! through its own catalog and router. Models and semantic checks only; connecting is
//! `quiver-upstream`'s job.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{excerpt, field, index};
use crate::model::{AliasSpec, LifecycleState, SideEffects};
use crate::validate::{
    SCOPE_FIX, TOOL_NAME_FIX, is_kebab_id, is_reserved_tool_name, is_scope, is_tool_name, reserved_name_message,
};

/// One upstream MCP server: a command spoken to over stdio, or a streamable HTTP endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The source's id (kebab-case, like a plugin id): names it in logs, `quiver list`, scopes
    /// and `isolation`, and is the default tool-name prefix.
    pub name: String,
    /// Program to start (stdio transport); looked up on `PATH` when it has no `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments, passed as they are (no shell).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the program. It starts from an empty environment plus `PATH`, `HOME`,
    /// `LANG` and these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, ValueSource>,
    /// Working folder of the program, relative to the configuration file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP endpoint (`http://host:port/mcp`), instead of `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request (`url` only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, ValueSource>,
    /// Prepended to every upstream tool name (after turning it into a Quiver tool name:
    /// `getTinyImage` → `get_tiny_image`). Default: the source name with `-` as `_`, then `_`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Lifecycle state of tools no override names. Default `deferred`: found by search and
    /// loaded on demand, so a large server costs no first-turn bytes.
    #[serde(default = "deferred")]
    pub state: LifecycleState,
    /// Scopes a caller must hold to see or call any tool of this source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Upstream tool names (globs with `*`) not served at all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Deadline of a call, unless a tool override says otherwise. Default 30000.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// How long the first connection may take before the host starts without this source's
    /// tools (they join when it connects). Default 15000.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// Operator overrides per upstream tool name (as the upstream names it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ToolOverride>,
}

fn deferred() -> LifecycleState {
    LifecycleState::Deferred
}
fn default_timeout() -> u64 {
    30_000
}
fn default_connect_timeout() -> u64 {
    15_000
}

impl UpstreamConfig {
    /// The tool-name prefix in force.
    pub fn effective_prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("{}_", self.name.replace('-', "_")))
    }

    /// True when the upstream tool `name` is excluded.
    pub fn excludes(&self, name: &str) -> bool {
        self.exclude.iter().any(|g| crate::config::glob_matches(g, name))
    }
}

/// A value given in the configuration, or read at start from an environment variable or a file.
/// Secrets must come from `env` or `file`: the configuration is not a place for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ValueSource {
    /// The value itself (not for secrets).
    Literal(String),
    /// `{env: NAME}`: the value of the host's environment variable `NAME`.
    Env {
        /// The variable's name.
        env: String,
    },
    /// `{file: PATH}`: the contents of a file (trailing newline removed), relative to the
    /// configuration file's folder.
    File {
        /// The file.
        file: PathBuf,
    },
}

/// What the operator says about one upstream tool, over what the upstream says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolOverride {
    /// The Quiver name of the tool, instead of prefix + converted upstream name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Short human title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does and when to use it (upstream descriptions are often poor for search).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Lifecycle state (`active` puts it on the first-turn surface).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<LifecycleState>,
    /// The tool to use instead (deprecated, hidden-compatibility, removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// First version (of the upstream server) that deprecated the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_deprecated_version: Option<semver::Version>,
    /// Version planned to remove the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_removal_version: Option<semver::Version>,
    /// Version that removed the name (state `removed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_in_version: Option<semver::Version>,
    /// Other names that reach the tool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<AliasSpec>,
    /// Scopes a caller must hold, added to the source's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Risk of a call, instead of what the upstream's annotations suggest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side_effects: Option<SideEffects>,
    /// A person must confirm each call (default: true for destructive tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<bool>,
    /// Deadline of a call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retries of retryable errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Result bytes kept before truncation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<u64>,
    /// Domain for search filters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Capability keywords.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// User requests that should find the tool.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// Header and variable names whose values are credentials: they must come from `env` or `file`.
fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["authorization", "token", "secret", "password", "passwd", "api_key", "apikey", "api-key", "cookie", "credential"]
        .iter()
        .any(|s| n.contains(s))
}

/// The semantic checks of `sources`.
pub(crate) fn source_issues(sources: &[UpstreamConfig], push: &mut dyn FnMut(String, String, &str)) {
    let mut names = BTreeSet::new();
    for (n, s) in sources.iter().enumerate() {
        let at = index("sources", n);
        if !is_kebab_id(&s.name) {
            push(
                field(&at, "name"),
                format!("`{}` is not a source name", excerpt(&s.name)),
                "use kebab-case like a plugin id, e.g. `github` or `local-files`",
            );
        } else if !names.insert(s.name.as_str()) {
            push(field(&at, "name"), format!("source `{}` is given twice", s.name), "give each source its own name");
        }
        match (&s.command, &s.url) {
            (Some(_), Some(_)) | (None, None) => push(
                at.clone(),
                "a source needs exactly one of `command` (stdio) and `url` (streamable HTTP)".into(),
                "give `command` (with `args`) to start a server, or `url` to reach a running one",
            ),
            (Some(c), None) if c.trim().is_empty() => {
                push(field(&at, "command"), "the command is empty".into(), "name the program, e.g. `npx`")
            }
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => push(
                field(&at, "url"),
                format!("`{}` is not an http(s) URL", excerpt(u)),
                "write the server's MCP endpoint, e.g. `http://127.0.0.1:8000/mcp`",
            ),
            _ => {}
        }
        if s.url.is_none() && !s.headers.is_empty() {
            push(field(&at, "headers"), "headers are sent only to a `url` source".into(), "remove `headers`");
        }
        if s.command.is_none() && (!s.args.is_empty() || !s.env.is_empty() || s.cwd.is_some()) {
            push(
                at.clone(),
                "`args`, `env` and `cwd` apply only to a `command` source".into(),
                "remove them, or start the server with `command`",
            );
        }
        for (what, map) in [("env", &s.env), ("headers", &s.headers)] {
            for (k, v) in map {
                if let ValueSource::Literal(_) = v
                    && is_secret_name(k)
                {
                    push(
                        field(&field(&at, what), k),
                        format!("`{k}` looks like a credential, and its value is written in the configuration"),
                        "read it at start instead: `{env: VARIABLE}` or `{file: path/to/secret}`",
                    );
                }
            }
        }
        let prefix = s.effective_prefix();
        if !prefix.is_empty() && !is_tool_name(&prefix) {
            push(
                field(&at, "prefix"),
                format!("`{}` cannot start a tool name", excerpt(&prefix)),
                "use a lower-case letter, then lower-case letters, digits or `_`, e.g. `gh_`",
            );
        }
        for (i, scope) in s.scopes.iter().enumerate() {
            if !is_scope(scope) {
                push(index(&field(&at, "scopes"), i), format!("`{}` is not a scope", excerpt(scope)), SCOPE_FIX);
            }
        }
        if s.timeout_ms == 0 {
            push(field(&at, "timeout_ms"), "a 0 ms deadline fails every call".into(), "use at least 1");
        }
        if s.connect_timeout_ms == 0 {
            push(field(&at, "connect_timeout_ms"), "a 0 ms connect timeout".into(), "use at least 1");
        }
        for (tool, o) in &s.tools {
            let ot = field(&field(&at, "tools"), tool);
            if let Some(name) = &o.name {
                if !is_tool_name(name) {
                    push(field(&ot, "name"), format!("`{}` is not a tool name", excerpt(name)), TOOL_NAME_FIX);
                } else if is_reserved_tool_name(name) {
                    push(field(&ot, "name"), reserved_name_message(name), "choose another name");
                }
            }
            for (i, a) in o.aliases.iter().enumerate() {
                if !is_tool_name(&a.name) {
                    push(
                        field(&index(&field(&ot, "aliases"), i), "name"),
                        format!("`{}` is not a tool name", excerpt(&a.name)),
                        TOOL_NAME_FIX,
                    );
                } else if is_reserved_tool_name(&a.name) {
                    push(
                        field(&index(&field(&ot, "aliases"), i), "name"),
                        reserved_name_message(&a.name),
                        "choose another name",
                    );
                }
                if a.state.is_visible() {
                    push(
                        field(&index(&field(&ot, "aliases"), i), "state"),
                        "aliases are never on the surface".into(),
                        "use `hidden-compatibility`, `deprecated` or `removed`",
                    );
                }
            }
            for (i, scope) in o.scopes.iter().enumerate() {
                if !is_scope(scope) {
                    push(index(&field(&ot, "scopes"), i), format!("`{}` is not a scope", excerpt(scope)), SCOPE_FIX);
                }
            }
            if o.state == Some(LifecycleState::Removed) && o.replacement.is_none() {
                push(
                    field(&ot, "replacement"),
                    "a removed tool must name its replacement".into(),
                    "add `replacement: <tool name>`",
                );
            }
            if o.timeout_ms == Some(0) {
                push(field(&ot, "timeout_ms"), "a 0 ms deadline fails every call".into(), "use at least 1");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::HostConfig;
    use crate::model::{LifecycleState, SideEffects};

    use super::ValueSource;

    #[test]
    fn sources_read_with_overrides_and_defaults() {
        let cfg = HostConfig::from_yaml(
            r#"
sources:
  - name: github
    url: https://api.example.com/mcp
    headers: {Authorization: {env: GITHUB_AUTH}, X-Client: quiver}
    scopes: [gh]
    tools:
      create_issue: {state: active, side_effects: write, description: File a bug report., aliases: [{name: new_issue, state: deprecated}]}
  - name: local-files
    command: npx
    args: [-y, some-server, /srv]
    env: {ROOT: /srv, TOKEN: {file: secrets/token}}
"#,
            "quiver.yaml",
        )
        .unwrap();
        let gh = &cfg.sources[0];
        assert_eq!(gh.effective_prefix(), "github_");
        assert_eq!(gh.state, LifecycleState::Deferred, "upstream tools are deferred unless said otherwise");
        assert_eq!(gh.timeout_ms, 30_000);
        let o = &gh.tools["create_issue"];
        assert_eq!(o.state, Some(LifecycleState::Active));
        assert_eq!(o.side_effects, Some(SideEffects::Write));
        assert_eq!(o.aliases[0].name, "new_issue");
        assert_eq!(gh.headers["Authorization"], ValueSource::Env { env: "GITHUB_AUTH".into() });
        let files = &cfg.sources[1];
        assert_eq!(files.effective_prefix(), "local_files_");
        assert_eq!(files.env["TOKEN"], ValueSource::File { file: "secrets/token".into() });
        assert_eq!(files.env["ROOT"], ValueSource::Literal("/srv".into()));
    }

    #[test]
    fn bad_sources_are_named_with_the_fix() {
        let err = HostConfig::from_yaml("sources:\n  - name: Bad Name\n    command: x\n", "quiver.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sources[0].name") && err.contains("kebab-case"), "{err}");
        let err = HostConfig::from_yaml(
            r#"
sources:
  - name: both
    command: x
    url: http://h/mcp
  - name: leaky
    url: http://h/mcp
    headers: {Authorization: Bearer abc123}
  - name: leaky
    command: x
    env: {API_KEY: abc}
    tools:
      t: {state: removed}
  - name: web
    url: ftp://h/mcp
  - name: meta
    command: x
    tools:
      find: {name: tool_search, aliases: [{name: run_tool, state: hidden-compatibility}]}
"#,
            "quiver.yaml",
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "sources[0]: a source needs exactly one of `command`",
            "sources[1].headers.Authorization",
            "{env: VARIABLE}",
            "sources[2].name",
            "given twice",
            "sources[2].env.API_KEY",
            "sources[2].tools.t.replacement",
            "sources[3].url",
            "sources[4].tools.find.name: `tool_search` is the name of one of Quiver's own meta tools",
            "sources[4].tools.find.aliases[0].name: `run_tool`",
        ] {
            assert!(err.contains(needle), "missing `{needle}` in:\n{err}");
        }
        assert!(!err.contains("abc123"), "a credential never appears in an error: {err}");
    }
}

//! The error of reading a manifest or host configuration: every problem found, each with the
//! field it concerns and how to fix it.

use std::fmt;

/// Issues reported beyond this many are summarised in one last issue.
const MAX_ISSUES: usize = 100;

/// The path of the whole document, for problems not tied to one field.
pub(crate) const DOCUMENT: &str = "(document)";

/// One problem in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Where: a field path such as `tools[2].policies.timeout_ms`, or `(document)` for the whole
    /// file (size, YAML syntax).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
    /// For a path inside `tools[N]` of a manifest: that tool's name, shown after the path
    /// (`tools[1].policies (tool `search`)`) so a long manifest need not be counted through.
    pub tool: Option<String>,
}

impl Issue {
    /// An issue at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Issue {
        Issue { path: path.into(), message: message.into(), fix: fix.into(), tool: None }
    }
}

/// Names the tool of each issue inside `tools[N]` of the manifest document `doc` (see
/// [`Issue::tool`]), unless what is wrong is that tool's name itself, it has none, or the
/// message names it already.
pub(crate) fn name_tools(issues: &mut [Issue], doc: &serde_json::Value) {
    for issue in issues {
        let Some(rest) = issue.path.strip_prefix("tools[") else { continue };
        let Some((n, after)) = rest.split_once(']') else { continue };
        if after == ".name" || after.starts_with(".name.") {
            continue;
        }
        let name = n.parse::<usize>().ok().and_then(|n| doc.get("tools")?.get(n)?.get("name")?.as_str());
        // A message that names the tool already says it once.
        let name = name.filter(|n| !n.is_empty() && n.len() <= 64 && !issue.message.contains(&format!("`{n}`")));
        issue.tool = name.map(str::to_owned);
    }
}

/// A manifest or configuration that cannot be used, with every problem found in it.
///
/// Displays as one line per issue: `{origin}: {path}: {message} (fix: {fix})`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The file the document came from (a name used in messages, e.g. `tool.yaml`).
    pub origin: String,
    /// The problems, at least one, in the order found.
    pub issues: Vec<Issue>,
}

impl ManifestError {
    /// An error with the given issues; more than 100 are cut to 100 plus a summary line.
    pub fn new(origin: impl Into<String>, mut issues: Vec<Issue>) -> ManifestError {
        if issues.len() > MAX_ISSUES {
            let more = issues.len() - MAX_ISSUES;
            issues.truncate(MAX_ISSUES);
            issues.push(Issue::new(
                DOCUMENT,
                format!("{more} further problems not shown"),
                "fix the problems above and check the file again",
            ));
        }
        ManifestError { origin: origin.into(), issues }
    }

    /// An error with one issue.
    pub fn single(origin: impl Into<String>, issue: Issue) -> ManifestError {
        ManifestError::new(origin, vec![issue])
    }

    /// True when some issue concerns exactly `path`.
    pub fn has_path(&self, path: &str) -> bool {
        self.issues.iter().any(|i| i.path == path)
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, issue) in self.issues.iter().enumerate() {
            if n > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}: {issue}", self.origin)?;
        }
        Ok(())
    }
}

/// `{path}: {message} (fix: {fix})`.
impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(tool) => write!(f, "{} (tool `{tool}`): {} (fix: {})", self.path, self.message, self.fix),
            None => write!(f, "{}: {} (fix: {})", self.path, self.message, self.fix),
        }
    }
}

impl std::error::Error for ManifestError {}

/// The issue of a document that passed its schema but does not fit the typed model `what`,
/// at the field the typed model stopped at.
pub(crate) fn model_issue(e: serde_path_to_error::Error<serde_json::Error>, what: &str, schema: &str) -> Issue {
    use serde_path_to_error::Segment;
    let mut path = String::new();
    for segment in e.path().iter() {
        path = match segment {
            Segment::Seq { index: n } => index(&path, *n),
            Segment::Map { key } | Segment::Enum { variant: key } => field(&path, key),
            Segment::Unknown => break,
        };
    }
    let inner = e.into_inner().to_string();
    let fix = if inner.starts_with("invalid type: floating point") {
        // JSON Schema counts `1500.0` as an integer; the typed model does not.
        "write a whole number without a decimal point or exponent (`1500`, not `1500.0` or `1.5e3`)".to_owned()
    } else {
        format!("see {schema}")
    };
    let path = if path.is_empty() { DOCUMENT.to_owned() } else { path };
    Issue::new(path, format!("does not fit the {what} model: {inner}"), fix)
}

/// `parent.name`, or `name` at the top.
pub(crate) fn field(parent: &str, name: &str) -> String {
    let simple = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), simple) {
        (true, true) => name.to_owned(),
        (false, true) => format!("{parent}.{name}"),
        (_, false) => format!("{parent}[{}]", serde_json::Value::from(name)),
    }
}

/// `parent[index]`.
pub(crate) fn index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Shortens `text` for quoting in a message.
pub(crate) fn excerpt(text: &str) -> String {
    excerpt_n(text, 60)
}

/// Shortens `text` to at most `max` characters plus an ellipsis.
pub(crate) fn excerpt_n(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// A JSON value quoted for a message, shortened.
pub(crate) fn quote_value(value: &serde_json::Value) -> String {
    excerpt(&value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(field("", "tools"), "tools");
        assert_eq!(field(&index("tools", 2), "policies"), "tools[2].policies");
        assert_eq!(field("profiles", "my profile"), "profiles[\"my profile\"]");
    }

    #[test]
    fn display_one_line_per_issue() {
        let e = ManifestError::new(
            "tool.yaml",
            vec![Issue::new("id", "bad id", "use kebab-case"), Issue::new("tools[0].name", "bad name", "rename it")],
        );
        assert_eq!(
            e.to_string(),
            "tool.yaml: id: bad id (fix: use kebab-case)\ntool.yaml: tools[0].name: bad name (fix: rename it)"
        );
    }

    #[test]
    fn caps_issue_count() {
        let issues = (0..150).map(|n| Issue::new(format!("x{n}"), "m", "f")).collect();
        let e = ManifestError::new("a", issues);
        assert_eq!(e.issues.len(), 101);
        assert!(e.issues[100].message.contains("50 further"));
    }
}

//! Untrusted YAML text to a JSON value: a size cap, a conservative scan that refuses anchors,
//! aliases and tags, and a conversion that refuses non-string and merge (`<<`) keys.
//!
//! The scan works on the text rather than on parser events (serde_yaml does not expose them). It
//! is conservative: it may refuse an unusual but valid document (say, a continuation line of an
//! unquoted value starting with `*`), never the other way round; the message then says to quote
//! the value.

use serde_json::{Map, Number, Value};

use crate::error::{DOCUMENT, Issue, field, index};

/// Largest manifest or configuration file accepted, in bytes (1 MiB).
pub const MAX_YAML_BYTES: usize = 1024 * 1024;

/// Deepest nesting accepted (block indentation levels, `-`/`?` entries and flow brackets,
/// counted by the pre-scan before the parser sees the text). serde_yaml's cost grows with the
/// square of the depth (issue 10: 200k levels ran for minutes); at 64 levels a 1 MiB document
/// parses in milliseconds (test `deep_nesting_is_refused_before_parsing`).
pub const MAX_YAML_DEPTH: usize = 64;

/// Parses `text` into a JSON value, or the issues that prevent it.
pub(crate) fn parse(text: &str) -> Result<Value, Vec<Issue>> {
    if text.len() > MAX_YAML_BYTES {
        return Err(vec![Issue::new(
            DOCUMENT,
            format!("the file is {} bytes, over the {MAX_YAML_BYTES}-byte (1 MiB) limit", text.len()),
            "shrink the file below 1 MiB (large schemas belong in the plugin, not its manifest)",
        )]);
    }
    if let Some(issue) = scan_for_references(text) {
        return Err(vec![issue]);
    }
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        let full = e.to_string();
        let message = strip_location(&full);
        let location = e.location().map(|l| (l.line(), l.column()));
        if let Some(key) = duplicate_key(message)
            && let Some((line, column)) = location.and_then(|(l, c)| second_entry(text, l, c, key))
        {
            return vec![Issue::new(
                DOCUMENT,
                format!("not valid YAML at line {line} column {column}: {message} (entered again here)"),
                format!("keep one `{key}` entry of that mapping: YAML allows each key once"),
            )];
        }
        if let Some((path, number)) = huge_integer(message) {
            let (what, bound) = if number.starts_with('-') {
                ("too small: numbers go down to", i64::MIN.to_string())
            } else {
                ("too large: numbers go up to", u64::MAX.to_string())
            };
            return vec![Issue::new(
                if path.is_empty() { DOCUMENT } else { path },
                format!("`{number}` is {what} {bound}"),
                "write a number within that range, or quote it to make it text",
            )];
        }
        let at = location.map(|(l, c)| format!(" at line {l} column {c}")).unwrap_or_default();
        vec![Issue::new(
            DOCUMENT,
            format!("not valid YAML{at}: {message}"),
            "correct the YAML syntax (indent with spaces, quote values that contain `: ` or start with a special character)",
        )]
    })?;
    let mut issues = Vec::new();
    let value = to_json(yaml, &At::Root, &mut issues);
    if issues.is_empty() { Ok(value) } else { Err(issues) }
}

/// The field path and the digits of serde_yaml's error for an integer beyond 64 bits
/// (`tools[1].policies.timeout_ms: invalid type: integer `99…` as u128, ...`).
fn huge_integer(message: &str) -> Option<(&str, &str)> {
    let (path, rest) = message.split_once("invalid type: integer `")?;
    let (number, rest) = rest.split_once('`')?;
    (rest.starts_with(" as u128") || rest.starts_with(" as i128"))
        .then_some((path.strip_suffix(": ").unwrap_or(path), number))
}

/// The key of serde_yaml's "duplicate entry with key \"K\"" error (a plain key), if it is one.
fn duplicate_key(message: &str) -> Option<&str> {
    let key = message.split("duplicate entry with key \"").nth(1)?.strip_suffix('"')?;
    (!key.is_empty() && !key.contains(['"', '\\'])).then_some(key)
}

/// Where `key` is entered the second time in the block mapping whose first entry serde_yaml
/// reports at `line`/`column` (1-based; it points at the mapping, not at the duplicate): the
/// second line from there, at that indentation, that starts with `key:`. `None` when the
/// mapping is not written in block style that way (the reported location then stands).
fn second_entry(text: &str, line: usize, column: usize, key: &str) -> Option<(usize, usize)> {
    let indent = column.checked_sub(1)?;
    let mut seen = 0;
    for (n, l) in text.lines().enumerate().skip(line.checked_sub(1)?) {
        let (lead, rest) = l.split_at(l.len() - l.trim_start_matches(' ').len());
        if rest.is_empty() || rest.starts_with('#') {
            continue;
        }
        if lead.len() < indent && n + 1 > line {
            return None;
        }
        let rest = rest.strip_prefix("- ").filter(|_| lead.len() + 2 == indent).unwrap_or(rest);
        if (lead.len() == indent || l.len() - rest.len() == indent)
            && rest.strip_prefix(key).is_some_and(|r| r.trim_start_matches(' ').starts_with(':'))
        {
            seen += 1;
            if seen == 2 {
                return Some((n + 1, indent + 1));
            }
        }
    }
    None
}

/// serde_yaml appends " at line L column C"; the location is reported separately.
fn strip_location(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(at) => &message[..at],
        None => message,
    }
}

/// Where a node is: its field path (`tools[2].name`), written out only when an issue names it
/// (a document has thousands of nodes and, as a rule, no issue).
enum At<'a> {
    Root,
    Field(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    /// The field path, `""` at the root.
    fn path(&self) -> String {
        match self {
            At::Root => String::new(),
            At::Field(parent, name) => field(&parent.path(), name),
            At::Index(parent, n) => index(&parent.path(), *n),
        }
    }
}

fn to_json(yaml: serde_yaml::Value, path: &At<'_>, issues: &mut Vec<Issue>) -> Value {
    use serde_yaml::Value as Y;
    let at = |path: &At<'_>| match path {
        At::Root => DOCUMENT.to_owned(),
        _ => path.path(),
    };
    match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                match n.as_f64().and_then(Number::from_f64) {
                    Some(f) => Value::Number(f),
                    None => {
                        issues.push(Issue::new(
                            at(path),
                            format!("`{n}` is not a finite number"),
                            "write a finite number, or quote the value to make it text",
                        ));
                        Value::Null
                    }
                }
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(
            items.into_iter().enumerate().map(|(n, item)| to_json(item, &At::Index(path, n), issues)).collect(),
        ),
        Y::Mapping(mapping) => {
            let mut object = Map::new();
            for (key, value) in mapping {
                let key = match key {
                    Y::String(key) => key,
                    other => {
                        let shown = serde_yaml::to_string(&other).unwrap_or_default();
                        issues.push(Issue::new(
                            at(path),
                            format!("the key `{}` is not a string", shown.trim()),
                            "use text keys; quote keys such as `1`, `true` or `null`",
                        ));
                        continue;
                    }
                };
                if key == "<<" {
                    issues.push(Issue::new(
                        field(&path.path(), "<<"),
                        "YAML merge keys (`<<`) are not supported",
                        "write the fields out in full",
                    ));
                    continue;
                }
                let child = to_json(value, &At::Field(path, &key), issues);
                object.insert(key, child);
            }
            Value::Object(object)
        }
        Y::Tagged(tagged) => {
            issues.push(Issue::new(
                at(path),
                format!("YAML tags (`{}`) are not supported", tagged.tag),
                "remove the tag, or quote the value if the `!` is part of the text",
            ));
            Value::Null
        }
    }
}

/// Finds the first anchor (`&a`), alias (`*a`) or tag (`!t`) at a position where a YAML node may
/// start, outside quoted strings, comments and block scalars; and refuses nesting deeper than
/// [`MAX_YAML_DEPTH`]. The depth count may over-estimate an unusual layout, never under-estimate
/// by more than a factor of two, so the parser never sees a document deeper than twice the limit.
fn scan_for_references(text: &str) -> Option<Issue> {
    let mut quote: Option<char> = None;
    let mut flow_depth = 0usize;
    // Indentation columns of the enclosing block lines.
    let mut indents: Vec<usize> = Vec::new();
    let too_deep = |line_no: usize| {
        Some(Issue::new(
            DOCUMENT,
            format!("the YAML nests deeper than {MAX_YAML_DEPTH} levels (line {})", line_no + 1),
            "flatten the document; manifests and configurations never need this depth",
        ))
    };
    // Inside a block scalar (`|`, `>`): lines indented more than this are its content.
    let mut block_parent: Option<usize> = None;
    // One buffer for every line's characters.
    let mut chars: Vec<char> = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        chars.clear();
        chars.extend(line.chars());
        let indent = chars.iter().take_while(|c| **c == ' ').count();
        if let Some(parent) = block_parent {
            if line.trim().is_empty() || indent > parent {
                continue;
            }
            block_parent = None;
        }
        let is_space = |i: usize| chars.get(i).is_none_or(|c| *c == ' ' || *c == '\t');
        let content = line.trim_start_matches(' ');
        if quote.is_none() && !content.is_empty() && !content.starts_with('#') {
            while indents.last().is_some_and(|top| *top > indent) {
                indents.pop();
            }
            if indents.last() != Some(&indent) {
                indents.push(indent);
            }
            if indents.len() > MAX_YAML_DEPTH {
                return too_deep(line_no);
            }
        }
        let mut line_entries = 0usize;
        let mut expect_node = quote.is_none();
        // Column of the innermost key or `-` entry begun on this line: the parent of a block scalar.
        let mut parent_col = indent;
        let mut scalar_col = indent;
        let mut i = 0;
        if quote.is_none() && (line.starts_with("---") || line.starts_with("...")) && is_space(3) {
            i = 3;
        }
        while i < chars.len() {
            let c = chars[i];
            if let Some(q) = quote {
                if q == '"' && c == '\\' {
                    i += 2;
                    continue;
                }
                if c == q {
                    if q == '\'' && chars.get(i + 1) == Some(&'\'') {
                        i += 2;
                        continue;
                    }
                    quote = None;
                }
                i += 1;
                continue;
            }
            if expect_node {
                match c {
                    ' ' | '\t' => {}
                    '&' | '*' | '!' => {
                        let what = match c {
                            '&' => "anchors (`&name`)",
                            '*' => "aliases (`*name`)",
                            _ => "tags (`!tag`)",
                        };
                        return Some(Issue::new(
                            DOCUMENT,
                            format!("YAML {what} are not supported (line {}, column {})", line_no + 1, i + 1),
                            format!("write the value out in full, or quote it if the `{c}` is part of the text"),
                        ));
                    }
                    '"' | '\'' => {
                        quote = Some(c);
                        scalar_col = i;
                        expect_node = false;
                    }
                    '[' | '{' => {
                        flow_depth += 1;
                        if indents.len() + line_entries + flow_depth > MAX_YAML_DEPTH {
                            return too_deep(line_no);
                        }
                    }
                    ']' | '}' => {
                        flow_depth = flow_depth.saturating_sub(1);
                        expect_node = false;
                    }
                    ',' if flow_depth > 0 => {}
                    '#' => break,
                    '-' | '?' | ':' if is_space(i + 1) => {
                        if c == '-' {
                            parent_col = i;
                        }
                        if c != ':' {
                            line_entries += 1;
                            if indents.len() + line_entries + flow_depth > MAX_YAML_DEPTH {
                                return too_deep(line_no);
                            }
                        }
                    }
                    '|' | '>' if flow_depth == 0 => {
                        block_parent = Some(parent_col);
                        break;
                    }
                    _ => {
                        scalar_col = i;
                        expect_node = false;
                    }
                }
            } else {
                match c {
                    '#' if i > 0 && matches!(chars[i - 1], ' ' | '\t') => break,
                    ':' if is_space(i + 1) || (flow_depth > 0 && matches!(chars.get(i + 1), Some(',' | ']' | '}'))) => {
                        parent_col = scalar_col;
                        expect_node = true;
                    }
                    ',' if flow_depth > 0 => expect_node = true,
                    ']' | '}' if flow_depth > 0 => flow_depth -= 1,
                    _ => {}
                }
            }
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> bool {
        scan_for_references(text).is_some()
    }

    #[test]
    fn refuses_anchors_aliases_tags() {
        assert!(refused("a: &x 1\nb: *x\n"));
        assert!(refused("a: *x\n"));
        assert!(refused("- *x\n"));
        assert!(refused("a: [1, *x]\n"));
        assert!(refused("a: {b: 1, c: *x}\n"));
        assert!(refused("base: &b\n  x: 1\nderived:\n  <<: *b\n"));
        assert!(refused("a: !!str 1\n"));
        assert!(refused("--- &root\na: 1\n"));
        assert!(refused("tools:\n  - description: |\n      * fine\n    name: *x\n"));
    }

    #[test]
    fn accepts_star_and_ampersand_in_text() {
        assert!(!refused("a: matches *.txt & *.md\n"));
        assert!(!refused("a: \"*quoted\"\nb: '&also'\nc: 'it''s *fine'\n"));
        assert!(!refused("a: x # *comment\n# *whole line\n"));
        assert!(!refused("a: |\n  * bullet\n  & more\n\n  *after blank\nb: 1\n"));
        assert!(!refused("tools:\n  - description: >-\n      *folded\n    name: x\n"));
        assert!(!refused("a: \"multi\n  *line\"\n"));
        assert!(!refused("- |\n  *x\n- b\n"));
        assert!(!refused("url: http://x/*y\n"));
    }

    /// The inputs of issue 10 (200k levels, about 400 kB) in each nesting form are refused by
    /// the pre-scan, before serde_yaml sees them; at the limit, the parser is fast.
    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let depth = 200_000;
        let flow = format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth));
        let maps = format!("{}{}\n", "{a: ".repeat(depth), "}".repeat(depth));
        let dashes = format!("{}x\n", "- ".repeat(depth));
        let mut indented = String::new();
        for n in 0..1_000 {
            indented.push_str(&" ".repeat(n));
            indented.push_str("k:\n");
        }
        for (name, doc) in [("flow", &flow), ("flow maps", &maps), ("dashes", &dashes), ("indentation", &indented)] {
            let started = std::time::Instant::now();
            let issues = parse(doc).unwrap_err();
            assert!(issues[0].message.contains("nests deeper than 64"), "{name}: {issues:?}");
            // Generous: the scan is linear (milliseconds); the unbounded parser took minutes.
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "{name}: {:?}", started.elapsed());
        }
        // At the limit it parses.
        let ok = format!("a: {}{}\n", "[".repeat(MAX_YAML_DEPTH - 2), "]".repeat(MAX_YAML_DEPTH - 2));
        assert!(parse(&ok).is_ok());
        let mut ok = String::new();
        for n in 0..MAX_YAML_DEPTH - 1 {
            ok.push_str(&" ".repeat(n));
            ok.push_str("k:\n");
        }
        assert!(parse(&ok).is_ok());
        // Near the size cap, at the depth cap: still quick (serde_yaml under these limits).
        let row = format!("- {}1{}\n", "[".repeat(MAX_YAML_DEPTH - 3), "]".repeat(MAX_YAML_DEPTH - 3));
        let big = format!("a:\n{}", row.repeat((MAX_YAML_BYTES - 16) / row.len()));
        let started = std::time::Instant::now();
        assert!(parse(&big).is_ok());
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    }

    #[test]
    fn conversion_refuses_odd_keys() {
        let issues = parse("1: a\n").unwrap_err();
        assert!(issues[0].message.contains("not a string"), "{issues:?}");
        let issues = parse("a:\n  <<: {b: 1}\n").unwrap_err();
        assert_eq!(issues[0].path, "a[\"<<\"]");
        let issues = parse("a: .inf\n").unwrap_err();
        assert_eq!(issues[0].path, "a");
        // Nested paths, written out only for the nodes an issue names.
        let issues =
            parse("tools:\n  - name: x\n    opts: {1: a}\n  - {b: .nan, \"c d\": [0, {<<: {e: 1}}]}\n").unwrap_err();
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(paths, ["tools[0].opts", "tools[1].b", "tools[1][\"c d\"][1][\"<<\"]"], "{issues:?}");
    }

    #[test]
    fn size_cap_and_syntax() {
        let big = "a: b\n".repeat(MAX_YAML_BYTES / 4);
        assert!(parse(&big).unwrap_err()[0].message.contains("1 MiB"));
        let issues = parse("a: [1\n").unwrap_err();
        assert!(issues[0].message.starts_with("not valid YAML at line"), "{issues:?}");
        let issues = parse("a: 1\na: 2\n").unwrap_err();
        assert!(issues[0].message.contains("duplicate"), "{issues:?}");
    }

    /// A duplicate key is reported where it is entered again, not where its mapping starts.
    #[test]
    fn a_duplicate_key_is_placed_at_its_second_entry() {
        let at = |text: &str| {
            let issues = parse(text).unwrap_err();
            assert!(issues[0].message.contains("duplicate"), "{issues:?}");
            assert!(issues[0].fix.contains("keep one"), "{issues:?}");
            let m = &issues[0].message;
            m[m.find("line ").unwrap()..m.find(": ").unwrap()].to_owned()
        };
        assert_eq!(at("config_version: 1\nplugins_dir: p\nstrict: false\n# note\nstrict: true\n"), "line 5 column 1");
        assert_eq!(at("a: 1\nrouter:\n  x: 3\n\n  breaker: 4\n  breaker: 5\nb: 2\n"), "line 6 column 3");
        assert_eq!(at("keys:\n  - name: a\n    path: p\n    path: q\n"), "line 4 column 5");
    }
}

//! JSON helpers: an order-preserving reformatter (the workspace's `serde_json` sorts object keys,
//! so formatting goes through a small tree of its own that keeps keys, duplicates and number
//! spellings exactly as written), error positions, and path lookup (RFC 9535 JSONPath through
//! `serde_json_path`, JSON Pointer, and dotted paths such as `a.b[2].c`).

use quiver_abi::{ToolError, serde_json, serde_json::Value};

/// A parsed JSON value that remembers the source text of strings and numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    /// `null`, `true`, `false` or a number, as written.
    Atom(&'a str),
    /// A string, as written (with its quotes and escapes).
    Str(&'a str),
    /// An array.
    Array(Vec<Node<'a>>),
    /// An object: (raw key with quotes, value), in source order.
    Object(Vec<(&'a str, Node<'a>)>),
}

/// Checks `text` with `serde_json` and turns its error into one that names the line and column.
pub fn validate(text: &str, what: &str) -> Result<(), ToolError> {
    serde_json::from_str::<quiver_abi::serde::de::IgnoredAny>(text).map(|_| ()).map_err(|e| syntax_error(&e, what))
}

/// Parses `text` into a `serde_json::Value`, with positioned errors.
pub fn parse_value(text: &str, what: &str) -> Result<Value, ToolError> {
    serde_json::from_str(text).map_err(|e| syntax_error(&e, what))
}

fn syntax_error(e: &serde_json::Error, what: &str) -> ToolError {
    let msg = e.to_string();
    // serde_json appends " at line L column C"; say it in our own words.
    let reason = msg.split(" at line ").next().unwrap_or(&msg);
    ToolError::invalid(format!(
        "{what} is not valid JSON: {reason} at line {} column {}; fix the text there (JSON needs double quotes, \
         no trailing commas and no comments)",
        e.line(),
        e.column()
    ))
    .with_details(serde_json::json!({ "line": e.line(), "column": e.column() }))
}

/// Parses text already validated by [`validate`].
pub fn parse_tree(text: &str) -> Result<Node<'_>, ToolError> {
    let mut p = Parser { s: text, i: 0, depth: 0 };
    p.ws();
    let node = p.value()?;
    p.ws();
    if p.i != text.len() {
        return Err(ToolError::invalid("trailing characters after the JSON value"));
    }
    Ok(node)
}

/// Deepest nesting accepted (as `serde_json`'s own limit); keeps the recursive parser and writer
/// far from the stack's end.
pub const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    s: &'a str,
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while self.s.as_bytes().get(self.i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn fail(&self) -> ToolError {
        ToolError::invalid(format!("unexpected JSON text at byte {}", self.i))
    }

    fn value(&mut self) -> Result<Node<'a>, ToolError> {
        if matches!(self.s.as_bytes().get(self.i), Some(b'{' | b'[')) {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                let before = &self.s[..self.i];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                return Err(ToolError::invalid(format!(
                    "the input nests arrays and objects more than {MAX_DEPTH} levels deep (at line {line} column {column}); \
                     this tool does not format such documents"
                ))
                .with_details(serde_json::json!({ "line": line, "column": column })));
            }
        }
        let node = self.node();
        if matches!(node, Ok(Node::Array(_) | Node::Object(_))) {
            self.depth -= 1;
        }
        node
    }

    fn node(&mut self) -> Result<Node<'a>, ToolError> {
        match self.s.as_bytes().get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.as_bytes().get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Node::Object(members));
                }
                loop {
                    self.ws();
                    let key = self.string()?;
                    self.ws();
                    if self.s.as_bytes().get(self.i) != Some(&b':') {
                        return Err(self.fail());
                    }
                    self.i += 1;
                    self.ws();
                    members.push((key, self.value()?));
                    self.ws();
                    match self.s.as_bytes().get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Node::Object(members));
                        }
                        _ => return Err(self.fail()),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.as_bytes().get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Node::Array(items));
                }
                loop {
                    self.ws();
                    items.push(self.value()?);
                    self.ws();
                    match self.s.as_bytes().get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Node::Array(items));
                        }
                        _ => return Err(self.fail()),
                    }
                }
            }
            Some(b'"') => self.string().map(Node::Str),
            Some(_) => {
                let start = self.i;
                while self
                    .s
                    .as_bytes()
                    .get(self.i)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
                {
                    self.i += 1;
                }
                if start == self.i {
                    return Err(self.fail());
                }
                Ok(Node::Atom(&self.s[start..self.i]))
            }
            None => Err(self.fail()),
        }
    }

    fn string(&mut self) -> Result<&'a str, ToolError> {
        let b = self.s.as_bytes();
        if b.get(self.i) != Some(&b'"') {
            return Err(self.fail());
        }
        let start = self.i;
        self.i += 1;
        while let Some(&c) = b.get(self.i) {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Ok(&self.s[start..self.i]);
                }
                _ => self.i += 1,
            }
        }
        Err(self.fail())
    }
}

/// Sorts object members by their decoded key, recursively (stable: duplicates keep their order).
pub fn sort_keys(node: &mut Node<'_>) {
    match node {
        Node::Array(items) => items.iter_mut().for_each(sort_keys),
        Node::Object(members) => {
            members.iter_mut().for_each(|(_, v)| sort_keys(v));
            members.sort_by_cached_key(|(k, _)| serde_json::from_str::<String>(k).unwrap_or_default());
        }
        _ => {}
    }
}

/// Writes `node` compactly (`indent` = None) or pretty with `indent` spaces per level.
pub fn write(node: &Node<'_>, indent: Option<usize>, out: &mut String) {
    write_at(node, indent, 0, out);
}

fn newline(indent: Option<usize>, level: usize, out: &mut String) {
    if let Some(n) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * level));
    }
}

fn write_at(node: &Node<'_>, indent: Option<usize>, level: usize, out: &mut String) {
    match node {
        Node::Atom(s) | Node::Str(s) => out.push_str(s),
        Node::Array(items) if items.is_empty() => out.push_str("[]"),
        Node::Object(members) if members.is_empty() => out.push_str("{}"),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(indent, level + 1, out);
                write_at(item, indent, level + 1, out);
            }
            newline(indent, level, out);
            out.push(']');
        }
        Node::Object(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(indent, level + 1, out);
                out.push_str(k);
                out.push_str(if indent.is_some() { ": " } else { ":" });
                write_at(v, indent, level + 1, out);
            }
            newline(indent, level, out);
            out.push('}');
        }
    }
}

/// The JSON type name of a value.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// An object key (or, on an array, a decimal index).
    Key(String),
    /// An array index; negative counts from the end (dotted paths only).
    Index(i64),
    /// Every element of an array or every value of an object.
    Wildcard,
}

/// Escapes a key for a JSON Pointer.
pub fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Parses a JSON Pointer (RFC 6901): `""` is the whole document, else `/a/0/b~1c`.
pub fn parse_pointer(p: &str) -> Result<Vec<Step>, ToolError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(ToolError::invalid(format!(
            "JSON Pointer `{p}` must start with `/` (or be empty for the whole document)"
        )));
    };
    rest.split('/')
        .map(|token| {
            let mut key = String::new();
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        _ => {
                            return Err(ToolError::invalid(format!(
                                "JSON Pointer `{p}` has a bad escape in `{token}`: only `~0` (for ~) and `~1` (for /) are allowed"
                            )));
                        }
                    }
                } else {
                    key.push(c);
                }
            }
            Ok(Step::Key(key))
        })
        .collect()
}

/// Parses a dotted path: `a.b[2].c`, `$.items[*].name`, `items[-1]`, `["key.with.dots"]`, `a.*`.
pub fn parse_dotted(p: &str) -> Result<Vec<Step>, ToolError> {
    let bad = |why: &str| {
        ToolError::invalid(format!(
            "path `{p}` {why}; write paths like `a.b[2].c`, `items[*].name`, `[\"odd.key\"]` or a JSON Pointer like `/a/b/2/c`"
        ))
    };
    let s = p.trim();
    let s = s.strip_prefix('$').unwrap_or(s);
    let chars: Vec<char> = s.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                if i == chars.len() || chars[i] == '.' {
                    return Err(bad("has an empty name between dots"));
                }
            }
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']').map(|k| i + k);
                let inner: String = match chars.get(i + 1) {
                    Some(q @ ('"' | '\'')) => {
                        // Quoted key: up to the matching quote, then `]`.
                        let end = chars[i + 2..]
                            .iter()
                            .position(|c| c == q)
                            .map(|k| i + 2 + k)
                            .ok_or_else(|| bad("has an unclosed quote"))?;
                        if chars.get(end + 1) != Some(&']') {
                            return Err(bad("needs `]` after a quoted key"));
                        }
                        steps.push(Step::Key(chars[i + 2..end].iter().collect()));
                        i = end + 2;
                        continue;
                    }
                    _ => chars[i + 1..close.ok_or_else(|| bad("has an unclosed `[`"))?].iter().collect(),
                };
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::Wildcard);
                } else {
                    let n: i64 = inner.parse().map_err(|_| {
                        bad(&format!("has `[{inner}]`, which is not an index (use [\"{inner}\"] for a key)"))
                    })?;
                    steps.push(Step::Index(n));
                }
                i = close.unwrap_or(chars.len()) + 1;
            }
            _ => {
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                steps.push(if name == "*" { Step::Wildcard } else { Step::Key(name) });
            }
        }
    }
    Ok(steps)
}

/// A match: the pointer to it and the value.
pub type Match<'v> = (String, &'v Value);

/// Follows `steps` from `root`. Without wildcards there is exactly one match or an error; with
/// wildcards, branches where the rest of the path is missing are dropped.
pub fn select<'v>(root: &'v Value, steps: &[Step]) -> Result<Vec<Match<'v>>, ToolError> {
    let wild = steps.contains(&Step::Wildcard);
    let mut current: Vec<Match<'v>> = vec![(String::new(), root)];
    for step in steps {
        let mut next = Vec::new();
        for (ptr, v) in current {
            match (step, v) {
                (Step::Wildcard, Value::Array(items)) => {
                    next.extend(items.iter().enumerate().map(|(i, x)| (format!("{ptr}/{i}"), x)));
                }
                (Step::Wildcard, Value::Object(map)) => {
                    next.extend(map.iter().map(|(k, x)| (format!("{ptr}/{}", escape_pointer(k)), x)));
                }
                _ => match step_into(&ptr, v, step) {
                    Ok(found) => next.push(found),
                    Err(e) if wild => drop(e),
                    Err(e) => return Err(e),
                },
            }
        }
        current = next;
    }
    Ok(current)
}

fn shown(ptr: &str) -> &str {
    if ptr.is_empty() { "the document root" } else { ptr }
}

fn step_into<'v>(ptr: &str, v: &'v Value, step: &Step) -> Result<Match<'v>, ToolError> {
    match (v, step) {
        (Value::Object(map), Step::Key(k)) => {
            map.get(k).map(|x| (format!("{ptr}/{}", escape_pointer(k)), x)).ok_or_else(|| {
                let keys: Vec<&str> = map.keys().map(String::as_str).take(20).collect();
                let more = if map.len() > 20 { ", …" } else { "" };
                ToolError::not_found(format!(
                    "key `{k}` not found in the object at {}; its keys are: {}{more}",
                    shown(ptr),
                    if keys.is_empty() { "(none, it is empty)".to_owned() } else { keys.join(", ") }
                ))
            })
        }
        (Value::Array(items), Step::Key(k)) => {
            if k == "-" || (k.len() > 1 && k.starts_with('0')) || k.parse::<usize>().is_err() {
                return Err(ToolError::invalid(format!(
                    "`{k}` is not an array index at {} (an array of {} items); use 0 to {}",
                    shown(ptr),
                    items.len(),
                    items.len().saturating_sub(1)
                )));
            }
            step_into(ptr, v, &Step::Index(k.parse().unwrap_or(i64::MAX)))
        }
        (Value::Array(items), Step::Index(i)) => {
            let len = items.len() as i64;
            let idx = if *i < 0 { len + i } else { *i };
            if idx < 0 || idx >= len {
                return Err(ToolError::not_found(format!(
                    "index {i} is out of range at {}: the array has {len} items (valid: 0 to {}, or -1 for the last)",
                    shown(ptr),
                    len - 1
                )));
            }
            Ok((format!("{ptr}/{idx}"), &items[idx as usize]))
        }
        (Value::Object(_), Step::Index(i)) => Err(ToolError::not_found(format!(
            "{} is an object, not an array, so it has no index [{i}]; use a key name",
            shown(ptr)
        ))),
        (other, _) => Err(ToolError::not_found(format!(
            "{} is a {}, which has no members; the path goes too deep there",
            shown(ptr),
            type_name(other)
        ))),
    }
}

/// True when an RFC 9535 query can select at most one node: no wildcard, descendant segment,
/// filter, slice or union outside quoted names.
fn is_singular(path: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut prev = '\0';
    for c in path.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '*' | '?' | ':' | ',' => return false,
            '.' if prev == '.' => return false,
            _ => {}
        }
        prev = c;
    }
    true
}

/// Runs an RFC 9535 JSONPath query. A query that can select one node returns that value (and a
/// `not_found` error naming the keys there when it selects none); any other returns the array
/// of every node selected, in document order, possibly empty.
pub fn query_jsonpath(doc: &Value, path: &str) -> Result<(Value, Vec<String>), ToolError> {
    let query = serde_json_path::JsonPath::parse(path).map_err(|e| {
        ToolError::invalid(format!(
            "path `{path}` is not a valid JSONPath (RFC 9535): {} at character {}; filters look like \
             `$.items[?@.price < 10]`, strings in filters take single quotes",
            e.message(),
            e.position()
        ))
    })?;
    let found = query.query_located(doc);
    let pointers: Vec<String> = found.iter().map(|n| n.location().to_json_pointer()).collect();
    if is_singular(path) {
        match found.iter().next() {
            Some(node) => Ok((node.node().clone(), pointers)),
            None => {
                // The dotted reader says which key or index is missing, and what is there.
                if let Ok(steps) = parse_dotted(path) {
                    select(doc, &steps)?;
                }
                Err(ToolError::not_found(format!("nothing at `{path}` in the document")))
            }
        }
    } else {
        Ok((Value::Array(found.iter().map(|n| n.node().clone()).collect()), pointers))
    }
}

//! `text-tools`: JSON and plain-text utilities for agents.
//!
//! Tools: `json_query` (pick values out of a JSON document with an RFC 9535 JSONPath on
//! `serde_json_path`, filters included, a JSON Pointer or a dotted path like `a.b[2].c`), `json_format` (pretty-print, compact or sort keys, with
//! errors that name the line and column), `text_stats` (characters, words, lines, bytes and the
//! most frequent words), `text_diff` (a unified line diff on `similar`, Myers or patience, with
//! whitespace leniency and an optional word-level rendering) and
//! `text_transform` (case styles, trim, slugify, Base64, URL encoding, HTML escaping).
//!
//! Everything works on text passed in the call; nothing is read from or written to disk or the
//! network. What it does not do: JSONata-style expressions or transformations, JSON Schema
//! validation, regular-expression replacement, or patch application. No configuration.

pub mod diff;
pub mod json;
pub mod transform;

use std::collections::HashMap;

use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
    serde_json::Value,
};

/// Largest text any tool accepts, in bytes.
const MAX_TEXT: usize = 4 * 1024 * 1024;

fn check_size(what: &str, text: &str) -> Result<(), ToolError> {
    if text.len() > MAX_TEXT {
        return Err(ToolError::invalid(format!(
            "{what} is {} bytes; the limit is {MAX_TEXT} bytes — pass a smaller piece",
            text.len()
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// json_query

fn yes() -> bool {
    true
}

/// Arguments of `json_query`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct QueryInput {
    /// The JSON document: either JSON text in a string (for example an API response you were
    /// given) or the JSON value itself.
    pub document: Value,
    /// Where to look. A JSONPath starting with `$` (RFC 9535): `$.items[0].name`,
    /// `$.items[*].id`, filters such as `$.items[?@.price < 10 && @.tags[0] == 'new'].name`,
    /// slices `$.items[0:3]`, descendants `$..id`, functions `length()`, `count()`, `match()`,
    /// `search()`, `value()`. Or a JSON Pointer (`/items/0/name`, `""` for the whole document), or
    /// a dotted shorthand (`items[0].name`, `items[-1]` for the last item, `["key.with.dots"]`).
    pub path: String,
    /// When `document` is a string, parse it as JSON text (default true). Set false to query a
    /// plain string value as is.
    #[serde(default = "yes")]
    pub parse_string: bool,
}

/// Result of `json_query`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct QueryOutput {
    /// The value found; for a path with wildcards, an array of every value found (in document
    /// order; object members in key order).
    pub value: Value,
    /// JSON type of `value`: object, array, string, number, boolean or null.
    pub value_type: String,
    /// JSON Pointers of the values found (one for a path without wildcards).
    pub pointers: Vec<String>,
    /// Items of an array, members of an object or characters of a string `value`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
}

/// Picks values out of a JSON document.
pub struct JsonQuery;

impl Tool for JsonQuery {
    const NAME: &'static str = "json_query";
    type Input = QueryInput;
    type Output = QueryOutput;

    fn call(&self, input: QueryInput, _cx: &mut Context<'_>) -> Result<QueryOutput, ToolError> {
        let doc = match input.document {
            Value::String(text) if input.parse_string => {
                check_size("document", &text)?;
                json::parse_value(&text, "document")?
            }
            other => other,
        };
        let path = input.path.trim();
        let value_and_pointers = if path.starts_with('$') {
            json::query_jsonpath(&doc, path)?
        } else {
            let steps = if path.is_empty() || path.starts_with('/') {
                json::parse_pointer(path)?
            } else {
                json::parse_dotted(path)?
            };
            let wild = steps.contains(&json::Step::Wildcard);
            let found = json::select(&doc, &steps)?;
            let pointers: Vec<String> = found.iter().map(|(p, _)| p.clone()).collect();
            let value = if wild {
                Value::Array(found.into_iter().map(|(_, v)| v.clone()).collect())
            } else {
                found.into_iter().next().map(|(_, v)| v.clone()).unwrap_or(Value::Null)
            };
            (value, pointers)
        };
        let (value, pointers) = value_and_pointers;
        let length = match &value {
            Value::Array(a) => Some(a.len()),
            Value::Object(o) => Some(o.len()),
            Value::String(s) => Some(s.chars().count()),
            _ => None,
        };
        Ok(QueryOutput { value_type: json::type_name(&value).to_owned(), value, pointers, length })
    }
}

// ---------------------------------------------------------------------------------------------
// json_format

/// Layout of the formatted JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum Style {
    /// One member per line, indented.
    #[default]
    Pretty,
    /// No whitespace at all.
    Compact,
}

fn default_indent() -> usize {
    2
}

/// Arguments of `json_format`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FormatInput {
    /// The JSON text to format or check.
    pub json: String,
    /// `pretty` (default) or `compact`.
    #[serde(default)]
    pub style: Style,
    /// Spaces per level for `pretty`, 1 to 8 (default 2).
    #[serde(default = "default_indent")]
    pub indent: usize,
    /// Sort object keys alphabetically at every level (default false: keys keep their order).
    #[serde(default)]
    pub sort_keys: bool,
}

/// Result of `json_format`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct FormatOutput {
    /// The formatted JSON. Strings and numbers are kept exactly as written.
    pub formatted: String,
    /// JSON type of the top-level value.
    pub value_type: String,
    /// Size of `formatted` in bytes.
    pub bytes: usize,
    /// True when `formatted` differs from the input.
    pub changed: bool,
}

/// Formats and validates JSON.
pub struct JsonFormat;

impl Tool for JsonFormat {
    const NAME: &'static str = "json_format";
    type Input = FormatInput;
    type Output = FormatOutput;

    fn call(&self, input: FormatInput, _cx: &mut Context<'_>) -> Result<FormatOutput, ToolError> {
        check_size("json", &input.json)?;
        if !(1..=8).contains(&input.indent) {
            return Err(ToolError::invalid("indent must be between 1 and 8 spaces"));
        }
        json::validate(&input.json, "the input")?;
        let mut tree = json::parse_tree(&input.json)?;
        if input.sort_keys {
            json::sort_keys(&mut tree);
        }
        let mut formatted = String::with_capacity(input.json.len());
        json::write(&tree, (input.style == Style::Pretty).then_some(input.indent), &mut formatted);
        let value_type = match &tree {
            json::Node::Object(_) => "object",
            json::Node::Array(_) => "array",
            json::Node::Str(_) => "string",
            json::Node::Atom("null") => "null",
            json::Node::Atom("true" | "false") => "boolean",
            json::Node::Atom(_) => "number",
        };
        Ok(FormatOutput {
            value_type: value_type.to_owned(),
            bytes: formatted.len(),
            changed: formatted != input.json,
            formatted,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// text_stats

fn default_top() -> usize {
    10
}

/// Arguments of `text_stats`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct StatsInput {
    /// The text to measure.
    pub text: String,
    /// How many of the most frequent words to list (default 10, at most 100; 0 for none).
    #[serde(default = "default_top")]
    pub top_words: usize,
    /// Leave common English words (the, and, of, to …) out of `top_words`; default false.
    #[serde(default)]
    pub skip_stop_words: bool,
    /// Shortest word length (in characters) counted in `top_words`; default 1.
    #[serde(default)]
    pub min_word_length: usize,
}

/// A word and how often it occurs.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct WordCount {
    /// The word, lower-cased.
    pub word: String,
    /// Occurrences.
    pub count: usize,
}

/// Result of `text_stats`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct StatsOutput {
    /// Unicode characters (code points).
    pub chars: usize,
    /// Characters that are not whitespace.
    pub chars_no_spaces: usize,
    /// UTF-8 bytes.
    pub bytes: usize,
    /// Words, counted like `wc -w`: runs of non-whitespace.
    pub words: usize,
    /// Lines, counted like an editor: a final line without a line break counts, an empty text has 0.
    pub lines: usize,
    /// Lines with something other than whitespace.
    pub non_empty_lines: usize,
    /// Paragraphs: blocks of non-empty lines separated by blank lines.
    pub paragraphs: usize,
    /// Sentences, estimated from `.`, `!` and `?` followed by a space or the end.
    pub sentences: usize,
    /// Characters in the longest line.
    pub longest_line: usize,
    /// Average word length in letters and digits (over the words used for `top_words`).
    pub average_word_length: f64,
    /// Distinct words (lower-cased letters, digits, inner apostrophes and hyphens).
    pub unique_words: usize,
    /// Reading time at 200 words per minute, in whole seconds.
    pub reading_time_seconds: u64,
    /// The most frequent words, most frequent first (ties in alphabetical order).
    pub top_words: Vec<WordCount>,
}

const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "just", "may", "me", "more", "my", "no", "not", "of", "on", "or", "our", "out", "she",
    "so", "some", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to",
    "up", "us", "was", "we", "were", "what", "when", "which", "who", "will", "with", "would", "you", "your",
];

/// Lower-cased words: letters and digits, with `'`, `’` and `-` kept inside a word.
fn vocabulary(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut pending = None;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if let Some(p) = pending.take() {
                cur.push(p);
            }
            cur.extend(c.to_lowercase());
        } else if matches!(c, '\'' | '’' | '-') && !cur.is_empty() && pending.is_none() {
            pending = Some(if c == '’' { '\'' } else { c });
        } else {
            pending = None;
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Measures a text.
pub struct TextStats;

impl Tool for TextStats {
    const NAME: &'static str = "text_stats";
    type Input = StatsInput;
    type Output = StatsOutput;

    fn call(&self, input: StatsInput, _cx: &mut Context<'_>) -> Result<StatsOutput, ToolError> {
        let text = &input.text;
        check_size("text", text)?;
        let lines: Vec<&str> = text.lines().collect();
        let mut paragraphs = 0;
        let mut in_paragraph = false;
        for line in &lines {
            let blank = line.trim().is_empty();
            if !blank && !in_paragraph {
                paragraphs += 1;
            }
            in_paragraph = !blank;
        }
        let chars: Vec<char> = text.chars().collect();
        let sentences = chars
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                matches!(c, '.' | '!' | '?')
                    && chars.get(i + 1).is_none_or(|n| n.is_whitespace())
                    && i.checked_sub(1)
                        .and_then(|p| chars.get(p))
                        .is_some_and(|p| p.is_alphanumeric() || matches!(p, ')' | '"' | '\''))
            })
            .count();
        let words = text.split_whitespace().count();
        let vocab = vocabulary(text);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for w in &vocab {
            *counts.entry(w.as_str()).or_default() += 1;
        }
        let letters: usize = vocab.iter().map(|w| w.chars().filter(|c| c.is_alphanumeric()).count()).sum();
        let mut ranked: Vec<(&str, usize)> = counts
            .iter()
            .filter(|(w, _)| w.chars().count() >= input.min_word_length.max(1))
            .filter(|(w, _)| !(input.skip_stop_words && STOP_WORDS.contains(w)))
            .map(|(w, c)| (*w, *c))
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        ranked.truncate(input.top_words.min(100));
        Ok(StatsOutput {
            chars: chars.len(),
            chars_no_spaces: chars.iter().filter(|c| !c.is_whitespace()).count(),
            bytes: text.len(),
            words,
            lines: lines.len(),
            non_empty_lines: lines.iter().filter(|l| !l.trim().is_empty()).count(),
            paragraphs,
            sentences,
            longest_line: lines.iter().map(|l| l.chars().count()).max().unwrap_or(0),
            average_word_length: if vocab.is_empty() {
                0.0
            } else {
                (letters as f64 / vocab.len() as f64 * 100.0).round() / 100.0
            },
            unique_words: counts.len(),
            reading_time_seconds: (words as u64 * 60).div_ceil(200),
            top_words: ranked.into_iter().map(|(w, c)| WordCount { word: w.to_owned(), count: c }).collect(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// text_diff

fn default_context() -> usize {
    3
}
fn default_old_label() -> String {
    "a".to_owned()
}
fn default_new_label() -> String {
    "b".to_owned()
}

/// Line comparison algorithm of `text_diff`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "snake_case")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum DiffAlgorithm {
    /// Myers' algorithm (git's default): the fewest changed lines.
    #[default]
    Myers,
    /// Patience: anchors on lines that occur once in each text; often clearer for moved code
    /// blocks.
    Patience,
}

/// How `text_diff` compares whitespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "snake_case")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum WhitespaceRule {
    /// Whitespace counts exactly.
    #[default]
    Exact,
    /// Runs of whitespace compare as one space and trailing whitespace is ignored (`git diff -b`).
    IgnoreChanges,
    /// All whitespace is ignored (`git diff -w`).
    IgnoreAll,
}

/// Arguments of `text_diff`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DiffInput {
    /// The original text.
    pub old: String,
    /// The changed text.
    pub new: String,
    /// Unchanged lines shown around each change (default 3).
    #[serde(default = "default_context")]
    pub context: usize,
    /// Name of the original in the `---` header (default `a`), such as `config.old.yaml`.
    #[serde(default = "default_old_label")]
    pub old_label: String,
    /// Name of the changed text in the `+++` header (default `b`).
    #[serde(default = "default_new_label")]
    pub new_label: String,
    /// `myers` (default, fewest changed lines) or `patience` (clearer when blocks moved).
    #[serde(default)]
    pub algorithm: DiffAlgorithm,
    /// `exact` (default), `ignore_changes` (like `git diff -b`) or `ignore_all` (like `-w`).
    #[serde(default)]
    pub whitespace: WhitespaceRule,
    /// Also return `word_diff`: the new text with removed words as `[-old-]` and added words as
    /// `{+new+}` (for prose, where a line diff hides a one-word change).
    #[serde(default)]
    pub words: bool,
}

/// Result of `text_diff`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DiffOutput {
    /// Unified diff (`---`/`+++` headers, `@@ -l,n +l,n @@` hunks, ` `/`-`/`+` lines,
    /// `\ No newline at end of file` markers); empty when the texts are identical.
    pub diff: String,
    /// True when the texts are identical (under the chosen `whitespace` rule).
    pub identical: bool,
    /// Lines added.
    pub added: usize,
    /// Lines removed (a changed line counts as one removed and one added).
    pub removed: usize,
    /// Number of hunks.
    pub hunks: usize,
    /// Line similarity of the texts, 0.0 (nothing shared) to 1.0 (identical).
    pub similarity: f32,
    /// Word-level rendering (only with `words: true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub word_diff: Option<String>,
}

/// Diffs two texts line by line.
pub struct TextDiff;

impl Tool for TextDiff {
    const NAME: &'static str = "text_diff";
    type Input = DiffInput;
    type Output = DiffOutput;

    fn call(&self, input: DiffInput, _cx: &mut Context<'_>) -> Result<DiffOutput, ToolError> {
        check_size("old", &input.old)?;
        check_size("new", &input.new)?;
        if input.context > 1000 {
            return Err(ToolError::invalid("context must be at most 1000 lines"));
        }
        for label in [&input.old_label, &input.new_label] {
            if label.contains('\n') {
                return Err(ToolError::invalid("labels must be a single line"));
            }
        }
        let options = diff::Options {
            context: input.context,
            algorithm: match input.algorithm {
                DiffAlgorithm::Myers => similar::Algorithm::Myers,
                DiffAlgorithm::Patience => similar::Algorithm::Patience,
            },
            whitespace: match input.whitespace {
                WhitespaceRule::Exact => similar::WhitespaceMode::Exact,
                WhitespaceRule::IgnoreChanges => similar::WhitespaceMode::IgnoreChanges,
                WhitespaceRule::IgnoreAll => similar::WhitespaceMode::IgnoreAll,
            },
        };
        let u = diff::unified(&input.old, &input.new, &input.old_label, &input.new_label, options);
        Ok(DiffOutput {
            identical: u.hunks == 0,
            diff: u.text,
            added: u.added,
            removed: u.removed,
            hunks: u.hunks,
            similarity: (u.ratio * 1000.0).round() / 1000.0,
            word_diff: input.words.then(|| diff::word_diff(&input.old, &input.new)),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// text_transform

/// A transformation (variants are listed on [`TransformInput::operation`], so the schema shows a
/// plain string `enum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "snake_case")]
#[schemars(crate = "quiver_abi::schemars", inline)]
pub enum Operation {
    Upper,
    Lower,
    Title,
    SnakeCase,
    KebabCase,
    CamelCase,
    PascalCase,
    ConstantCase,
    Trim,
    CollapseWhitespace,
    Slugify,
    Base64Encode,
    Base64UrlEncode,
    Base64Decode,
    UrlEncode,
    UrlDecode,
    HtmlEscape,
}

/// Arguments of `text_transform`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct TransformInput {
    /// The text to transform.
    pub text: String,
    /// What to do. Case: `upper`, `lower`, `title` (Each Word Capitalized), `snake_case`
    /// (snake_case), `kebab_case` (kebab-case), `camel_case` (camelCase), `pascal_case`
    /// (PascalCase), `constant_case` (CONSTANT_CASE). Whitespace: `trim`, `collapse_whitespace`. Web: `slugify`
    /// (lower-case ASCII words joined by `-`), `url_encode`, `url_decode` (percent-encoding),
    /// `html_escape`. Base64: `base64_encode`, `base64_url_encode` (URL-safe, unpadded),
    /// `base64_decode` (either alphabet; the result must be UTF-8 text).
    pub operation: Operation,
    /// For `url_encode`/`url_decode`: form encoding, where a space is `+` (default false: `%20`).
    #[serde(default)]
    pub form: bool,
}

/// Result of `text_transform`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct TransformOutput {
    /// The transformed text.
    pub result: String,
    /// The operation applied.
    pub operation: Operation,
    /// True when `result` differs from the input.
    pub changed: bool,
}

fn utf8(bytes: Vec<u8>, what: &str) -> Result<String, ToolError> {
    String::from_utf8(bytes).map_err(|e| {
        ToolError::tool(format!(
            "the {what} bytes are not UTF-8 text (invalid at byte {}), so they cannot be returned as text; the input \
             probably encodes binary data",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Transforms text.
pub struct TextTransform;

impl Tool for TextTransform {
    const NAME: &'static str = "text_transform";
    type Input = TransformInput;
    type Output = TransformOutput;

    fn call(&self, input: TransformInput, _cx: &mut Context<'_>) -> Result<TransformOutput, ToolError> {
        use transform as t;
        let s = input.text.as_str();
        check_size("text", s)?;
        let result = match input.operation {
            Operation::Upper => s.to_uppercase(),
            Operation::Lower => s.to_lowercase(),
            Operation::Title => t::title(s),
            Operation::SnakeCase => t::snake(s),
            Operation::KebabCase => t::kebab(s),
            Operation::CamelCase => t::camel(s),
            Operation::PascalCase => t::pascal(s),
            Operation::ConstantCase => t::constant(s),
            Operation::Trim => s.trim().to_owned(),
            Operation::CollapseWhitespace => t::collapse_whitespace(s),
            Operation::Slugify => t::slugify(s),
            Operation::Base64Encode => t::base64_encode(s.as_bytes(), false),
            Operation::Base64UrlEncode => t::base64_encode(s.as_bytes(), true),
            Operation::Base64Decode => {
                let bytes = t::base64_decode(s).map_err(|e| ToolError::invalid(format!("not valid Base64: {e}")))?;
                utf8(bytes, "decoded")?
            }
            Operation::UrlEncode => t::url_encode(s, input.form),
            Operation::UrlDecode => {
                let bytes = t::url_decode(s, input.form)
                    .map_err(|e| ToolError::invalid(format!("not valid percent-encoding: {e}")))?;
                utf8(bytes, "decoded")?
            }
            Operation::HtmlEscape => t::html_escape(s),
        };
        Ok(TransformOutput { changed: result != input.text, result, operation: input.operation })
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [JsonQuery, JsonFormat, TextStats, TextDiff, TextTransform],
}

#[cfg(test)]
mod tests;

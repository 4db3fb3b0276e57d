//! Text diffs on `similar`: a line-based unified diff (Myers or patience), optional whitespace
//! leniency, and a word-level rendering of the same change.

use std::time::Duration;

use similar::{Algorithm, ChangeTag, TextDiff, WhitespaceMode};

/// How long one diff may search for a minimal edit script before settling for a valid, possibly
/// longer one (similar's deadline).
const SEARCH_BUDGET: Duration = Duration::from_secs(2);

/// Options of one diff.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Unchanged lines around each change.
    pub context: usize,
    /// Myers (default) or patience.
    pub algorithm: Algorithm,
    /// How whitespace is compared.
    pub whitespace: WhitespaceMode,
}

/// A rendered diff and its counts.
#[derive(Debug)]
pub struct Unified {
    /// The unified diff text (empty when identical).
    pub text: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
    /// Number of hunks.
    pub hunks: usize,
    /// Similarity of the two texts, 0.0 (nothing shared) to 1.0 (identical lines).
    pub ratio: f32,
}

/// Renders a unified diff of `old` and `new` with `---`/`+++` headers, GNU hunk ranges and
/// `\ No newline at end of file` markers.
pub fn unified(old: &str, new: &str, old_label: &str, new_label: &str, options: Options) -> Unified {
    let diff = TextDiff::configure()
        .algorithm(options.algorithm)
        .whitespace_mode(options.whitespace)
        .timeout(SEARCH_BUDGET)
        .diff_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let mut udiff = diff.unified_diff();
    udiff.context_radius(options.context).header(old_label, new_label);
    let hunks = udiff.iter_hunks().count();
    Unified { text: udiff.to_string(), added, removed, hunks, ratio: diff.ratio() }
}

/// The change as running text with word-level marks, like `git diff --word-diff=plain`: removed
/// words as `[-old-]`, added words as `{+new+}`.
pub fn word_diff(old: &str, new: &str) -> String {
    let diff = TextDiff::configure().timeout(SEARCH_BUDGET).diff_words(old, new);
    let mut out = String::with_capacity(old.len().max(new.len()) + 16);
    let mut open: Option<ChangeTag> = None;
    let close = |out: &mut String, tag: Option<ChangeTag>| match tag {
        Some(ChangeTag::Delete) => out.push_str("-]"),
        Some(ChangeTag::Insert) => out.push_str("+}"),
        _ => {}
    };
    for change in diff.iter_all_changes() {
        let tag = change.tag();
        if open != Some(tag) {
            close(&mut out, open);
            match tag {
                ChangeTag::Delete => out.push_str("[-"),
                ChangeTag::Insert => out.push_str("{+"),
                ChangeTag::Equal => {}
            }
            open = Some(tag);
        }
        out.push_str(change.value());
    }
    close(&mut out, open);
    out
}

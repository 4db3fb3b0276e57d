//! `fs-tools`: a file-system toolset for agents, confined to one root folder.
//!
//! Tools: `fs_read` (read a text file, by line window), `fs_list` (list a folder, optionally
//! recursively), `fs_search` (find literal text in files, honouring `.gitignore` and `.ignore`
//! files through the `ignore` crate), `fs_stat` (size, kind, modification
//! time) and `fs_edit` (one consolidated tool for `write`, `append`, `move` and `delete`).
//!
//! The root is `plugin_config.fs-tools.root` when set, else the `QUIVER_FS_ROOT` environment
//! variable, else the host process's current directory. Every path is resolved against it and
//! refused (`permission_denied`) when it leads outside — through `..`, an absolute path or a
//! symbolic link (see [`confine`]).
//!
//! What it does not do: read binary files (they are refused, not dumped), follow symbolic links
//! out of the root, search with regular expressions (literal text only), change permissions or
//! owners, or watch files. Confirmation of writes and deletes is the host's job (the manifest asks
//! for it); the tools themselves do not prompt.

pub mod confine;
mod walk;

use std::{
    fs,
    io::{BufRead, BufReader, Read, Write},
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use confine::{Mode, Root, io_error};
use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
};
use walk::{Walk, WalkItem};

/// Bytes at the start of a file scanned for a NUL byte to tell binary files from text.
const SNIFF_BYTES: usize = 8192;
/// Hard upper bound of `max_bytes` for `fs_read`.
const READ_BYTES_CAP: u64 = 1024 * 1024;
/// Files larger than this are skipped by `fs_search`.
const SEARCH_FILE_CAP: u64 = 4 * 1024 * 1024;
/// Characters of a matching line kept in a search result.
const SEARCH_LINE_CHARS: usize = 240;

fn default_max_lines() -> u64 {
    2000
}
fn default_max_bytes() -> u64 {
    32 * 1024
}
fn default_start_line() -> u64 {
    1
}
fn default_dot() -> String {
    ".".to_owned()
}
fn default_max_entries() -> usize {
    500
}
fn default_max_results() -> usize {
    100
}
fn yes() -> bool {
    true
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars")]
pub enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link (never followed when listing or searching).
    Symlink,
    /// Anything else (socket, device, pipe).
    Other,
}

impl Kind {
    fn of(ft: fs::FileType) -> Kind {
        if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            Kind::Other
        }
    }
}

fn root_of(cx: &Context<'_>) -> Result<Root, ToolError> {
    Root::from_config(cx.config())
}

fn looks_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

fn binary_error(path: &str, why: &str) -> ToolError {
    ToolError::tool(format!(
        "`{path}` looks like a binary file ({why}); fs_read returns text only. Use fs_stat for its size and kind"
    ))
}

// ---------------------------------------------------------------------------------------------
// fs_read

/// Arguments of `fs_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ReadInput {
    /// File to read, relative to the root folder (for example `src/main.rs`). Absolute paths are
    /// accepted only when they are inside the root.
    pub path: String,
    /// First line to return, 1-based. Use the `next_start_line` of a truncated result to continue.
    #[serde(default = "default_start_line")]
    #[schemars(range(min = 1))]
    pub start_line: u64,
    /// Most lines to return (default 2000).
    #[serde(default = "default_max_lines")]
    #[schemars(range(min = 1))]
    pub max_lines: u64,
    /// Most bytes of text to return (default 32768, at most 1048576). Reading stops before the
    /// line that would exceed it.
    #[serde(default = "default_max_bytes")]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_bytes: u64,
}

/// Result of `fs_read`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ReadOutput {
    /// The file, relative to the root.
    pub path: String,
    /// The text of the lines returned, with their line endings.
    pub content: String,
    /// Number of the first line returned (1-based).
    pub start_line: u64,
    /// Number of the last line returned; 0 when no line was returned.
    pub end_line: u64,
    /// Number of lines in the whole file.
    pub total_lines: u64,
    /// True when the file has more text after what was returned.
    pub truncated: bool,
    /// When truncated: the `start_line` to pass to read on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_start_line: Option<u64>,
    /// Size of the file in bytes.
    pub size: u64,
}

/// Reads a text file.
pub struct FsRead;

impl Tool for FsRead {
    const NAME: &'static str = "fs_read";
    type Input = ReadInput;
    type Output = ReadOutput;

    fn call(&self, input: ReadInput, cx: &mut Context<'_>) -> Result<ReadOutput, ToolError> {
        if input.start_line == 0 {
            return Err(ToolError::invalid("start_line is 1-based: pass 1 for the first line"));
        }
        if input.max_lines == 0 || input.max_bytes == 0 {
            return Err(ToolError::invalid("max_lines and max_bytes must be at least 1"));
        }
        let mut max_bytes = input.max_bytes.min(READ_BYTES_CAP);
        let host_cap = cx.request().invocation_policies.max_result_bytes;
        if host_cap > 0 && max_bytes > host_cap * 3 / 4 {
            max_bytes = (host_cap * 3 / 4).max(1);
            cx.observe(format!("max_bytes lowered to {max_bytes} to fit the host's result limit of {host_cap} bytes"));
        }
        let root = root_of(cx)?;
        let full = root.resolve(&input.path, Mode::EXISTING)?;
        let rel = root.relative(&full);
        // Opened beneath the root handle: no check-then-use race (see `confine`).
        let file = root.open_file(&full, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK, false)?;
        let meta = file.metadata().map_err(|e| io_error(&rel, "read", &e))?;
        if meta.is_dir() {
            return Err(ToolError::invalid(format!(
                "`{rel}` is a folder, not a file; use fs_list to see what it contains"
            )));
        }
        if !meta.is_file() {
            return Err(ToolError::invalid(format!("`{rel}` is not a regular file (a pipe, socket or device)")));
        }
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        {
            let head = reader.fill_buf().map_err(|e| io_error(&rel, "read", &e))?;
            if looks_binary(&head[..head.len().min(SNIFF_BYTES)]) {
                return Err(binary_error(&rel, "it contains NUL bytes"));
            }
        }

        let mut content = String::new();
        let mut line = Vec::new();
        let mut line_no = 0u64;
        let mut end_line = 0u64;
        let mut collecting = true;
        let mut truncated = false;
        let mut cut_line = None;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| io_error(&rel, "read", &e))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if line_no.is_multiple_of(65_536) && cx.is_cancelled() {
                return Err(ToolError::new(quiver_abi::ErrorCode::CANCELLED, "the read was cancelled"));
            }
            if line_no < input.start_line {
                continue;
            }
            if !collecting {
                truncated = true;
                continue;
            }
            let text = std::str::from_utf8(&line)
                .map_err(|_| binary_error(&rel, &format!("line {line_no} is not valid UTF-8")))?;
            let lines_taken = line_no - input.start_line;
            if lines_taken >= input.max_lines {
                collecting = false;
                truncated = true;
                continue;
            }
            if content.len() as u64 + text.len() as u64 > max_bytes {
                if content.is_empty() {
                    // A single line longer than the budget: return its head.
                    let mut cut = max_bytes as usize;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    content.push_str(&text[..cut]);
                    end_line = line_no;
                    cut_line = Some(line_no);
                }
                collecting = false;
                truncated = true;
                continue;
            }
            content.push_str(text);
            end_line = line_no;
        }
        let total_lines = line_no;
        if input.start_line > total_lines.max(1) {
            return Err(ToolError::invalid(format!(
                "start_line {} is past the end of `{rel}`, which has {total_lines} lines",
                input.start_line
            )));
        }
        if let Some(n) = cut_line {
            cx.observe(format!(
                "line {n} is longer than max_bytes ({max_bytes}); only its first {} bytes are shown",
                content.len()
            ));
        }
        cx.measure("bytes_read", content.len() as u64);
        Ok(ReadOutput {
            path: rel,
            content,
            start_line: input.start_line,
            end_line,
            total_lines,
            truncated,
            next_start_line: (truncated && end_line < total_lines).then_some(end_line + 1),
            size: meta.len(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// fs_list

/// Arguments of `fs_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ListInput {
    /// Folder to list, relative to the root; `.` (the default) is the root itself.
    #[serde(default = "default_dot")]
    pub path: String,
    /// Also list the contents of sub-folders (depth first, symbolic links are not entered).
    #[serde(default)]
    pub recursive: bool,
    /// With `recursive`: how many levels to descend (1 = only the folder's own entries).
    #[serde(default)]
    pub max_depth: Option<u32>,
    /// Most entries to return (default 500, at most 10000).
    #[serde(default = "default_max_entries")]
    pub max_entries: usize,
    /// Only list files whose name ends with this suffix, such as `.rs` or `*.md`; folders are then
    /// left out of the result (but still searched when recursive).
    #[serde(default)]
    pub suffix: Option<String>,
    /// Include names that start with a dot (`.git`, `.env`); default false.
    #[serde(default)]
    pub include_hidden: bool,
}

/// One entry of a listing.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ListEntry {
    /// Path relative to the root, with `/` separators.
    pub path: String,
    /// What the entry is.
    pub kind: Kind,
    /// Size in bytes (files only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Result of `fs_list`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct ListOutput {
    /// The folder listed, relative to the root.
    pub path: String,
    /// Entries sorted by name (sub-folder contents follow their folder when recursive).
    pub entries: Vec<ListEntry>,
    /// True when `max_entries` stopped the listing early.
    pub truncated: bool,
}

fn suffix_filter(suffix: &Option<String>) -> Option<String> {
    suffix.as_deref().map(|s| s.trim_start_matches('*').to_owned()).filter(|s| !s.is_empty())
}

/// Lists a folder.
pub struct FsList;

impl Tool for FsList {
    const NAME: &'static str = "fs_list";
    type Input = ListInput;
    type Output = ListOutput;

    fn call(&self, input: ListInput, cx: &mut Context<'_>) -> Result<ListOutput, ToolError> {
        if input.max_entries == 0 {
            return Err(ToolError::invalid("max_entries must be at least 1"));
        }
        let max_entries = input.max_entries.min(10_000);
        let root = root_of(cx)?;
        let dir = root.resolve(&input.path, Mode::EXISTING)?;
        let rel = root.relative(&dir);
        if !dir.is_dir() {
            return Err(ToolError::invalid(format!(
                "`{rel}` is a file, not a folder; use fs_stat or fs_read on it, or list its folder"
            )));
        }
        let filter = suffix_filter(&input.suffix);
        let depth = if input.recursive { input.max_depth.unwrap_or(u32::MAX).max(1) } else { 1 };
        let mut entries = Vec::new();
        let mut truncated = false;
        let mut walk = Walk::new(&dir, depth, input.include_hidden);
        while let Some(item) = walk.next_item() {
            let WalkItem { path, kind, size } = item;
            if let Some(f) = &filter {
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if kind == Kind::Dir || !name.ends_with(f.as_str()) {
                    continue;
                }
            }
            if entries.len() == max_entries {
                truncated = true;
                break;
            }
            entries.push(ListEntry { path: root.relative(&path), kind, size });
            if entries.len() % 256 == 0 && cx.is_cancelled() {
                break;
            }
        }
        if walk.unreadable > 0 {
            cx.observe(format!("{} folders could not be read and were skipped", walk.unreadable));
        }
        Ok(ListOutput { path: rel, entries, truncated })
    }
}

// ---------------------------------------------------------------------------------------------
// fs_search

/// Arguments of `fs_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SearchInput {
    /// Literal text to find (not a regular expression); must not contain a line break.
    pub query: String,
    /// Folder (searched recursively) or single file to search, relative to the root; default `.`.
    #[serde(default = "default_dot")]
    pub path: String,
    /// Match regardless of letter case; default false.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Most matching lines to return (default 100, at most 1000).
    #[serde(default = "default_max_results")]
    pub max_results: usize,
    /// Only search files whose name ends with this suffix, such as `.rs` or `*.md`.
    #[serde(default)]
    pub suffix: Option<String>,
    /// Also search names that start with a dot (`.github`, `.env`); default false.
    #[serde(default)]
    pub include_hidden: bool,
    /// Skip files excluded by `.gitignore`, `.ignore` and `.git/info/exclude` files in the
    /// searched folder and below (like ripgrep; files above `path` are not read); default true.
    /// Set false to search generated or vendored files too.
    #[serde(default = "yes")]
    pub respect_ignore: bool,
}

/// One matching line.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SearchMatch {
    /// File, relative to the root.
    pub path: String,
    /// Line number, 1-based.
    pub line: u64,
    /// Character column of the first match in the line, 1-based.
    pub column: u64,
    /// The line's text (without its line ending; long lines are cut to 240 characters).
    pub text: String,
}

/// Result of `fs_search`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SearchOutput {
    /// Matching lines, ordered by file path then line number.
    pub matches: Vec<SearchMatch>,
    /// True when `max_results` stopped the search early.
    pub truncated: bool,
    /// Text files searched.
    pub files_searched: u64,
    /// Files skipped because they are binary, not UTF-8, larger than 4 MiB or unreadable.
    pub files_skipped: u64,
}

/// Searches files for literal text.
pub struct FsSearch;

impl FsSearch {
    fn search_file(
        root: &Root,
        path: &Path,
        needle: &str,
        case_insensitive: bool,
        limit: usize,
        out: &mut Vec<(u64, u64, String)>,
    ) -> Option<bool> {
        let mut file = root.open_file(path, rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK, true).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > SEARCH_FILE_CAP {
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).ok()?;
        if looks_binary(&bytes[..bytes.len().min(SNIFF_BYTES)]) {
            return None;
        }
        let text = std::str::from_utf8(&bytes).ok()?;
        for (i, line) in text.lines().enumerate() {
            let hit = if case_insensitive {
                let lower = line.to_lowercase();
                lower.find(needle).map(|b| lower[..b].chars().count())
            } else {
                line.find(needle).map(|b| line[..b].chars().count())
            };
            if let Some(col) = hit {
                if out.len() == limit {
                    return Some(true);
                }
                let shown: String = if line.chars().count() > SEARCH_LINE_CHARS {
                    line.chars().take(SEARCH_LINE_CHARS).chain(['…']).collect()
                } else {
                    line.to_owned()
                };
                out.push((i as u64 + 1, col as u64 + 1, shown));
            }
        }
        Some(false)
    }
}

impl Tool for FsSearch {
    const NAME: &'static str = "fs_search";
    type Input = SearchInput;
    type Output = SearchOutput;

    fn call(&self, input: SearchInput, cx: &mut Context<'_>) -> Result<SearchOutput, ToolError> {
        if input.query.is_empty() {
            return Err(ToolError::invalid("query is empty: pass the text to find"));
        }
        if input.query.contains('\n') {
            return Err(ToolError::invalid("query must be a single line: search for one line of the text"));
        }
        if input.max_results == 0 {
            return Err(ToolError::invalid("max_results must be at least 1"));
        }
        let limit = input.max_results.min(1000);
        let needle = if input.case_insensitive { input.query.to_lowercase() } else { input.query.clone() };
        let root = root_of(cx)?;
        let start = root.resolve(&input.path, Mode::EXISTING)?;
        let filter = suffix_filter(&input.suffix);

        let mut unreadable = 0u64;
        let mut files = Vec::new();
        if start.is_dir() {
            // Ignore files are read only inside the root: none from parent folders, the user's
            // global git excludes or the environment, so results depend on the root alone.
            let walk = ignore::WalkBuilder::new(&start)
                .hidden(!input.include_hidden)
                .parents(false)
                .git_global(false)
                .git_ignore(input.respect_ignore)
                .git_exclude(input.respect_ignore)
                .ignore(input.respect_ignore)
                .require_git(false)
                .follow_links(false)
                .sort_by_file_name(|a, b| a.cmp(b))
                .build();
            for entry in walk {
                match entry {
                    Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => files.push(e.into_path()),
                    Ok(_) => {}
                    Err(_) => unreadable += 1,
                }
            }
        } else {
            files.push(start.clone());
        }

        let mut matches = Vec::new();
        let (mut searched, mut skipped, mut truncated) = (0u64, unreadable, false);
        for file in files {
            if let Some(f) = &filter
                && !file.file_name().is_some_and(|n| n.to_string_lossy().ends_with(f.as_str()))
            {
                continue;
            }
            if cx.is_cancelled() {
                cx.observe("search cancelled; results are partial");
                truncated = true;
                break;
            }
            let mut found = Vec::new();
            match FsSearch::search_file(
                &root,
                &file,
                &needle,
                input.case_insensitive,
                limit - matches.len(),
                &mut found,
            ) {
                None => skipped += 1,
                Some(hit_limit) => {
                    searched += 1;
                    let rel = root.relative(&file);
                    matches.extend(found.into_iter().map(|(line, column, text)| SearchMatch {
                        path: rel.clone(),
                        line,
                        column,
                        text,
                    }));
                    if hit_limit {
                        truncated = true;
                        break;
                    }
                }
            }
        }
        cx.measure("files_searched", searched);
        Ok(SearchOutput { matches, truncated, files_searched: searched, files_skipped: skipped })
    }
}

// ---------------------------------------------------------------------------------------------
// fs_stat

/// Arguments of `fs_stat`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct StatInput {
    /// File or folder, relative to the root.
    pub path: String,
}

/// Result of `fs_stat`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct StatOutput {
    /// The path, relative to the root (the link's target when `path` is a symbolic link).
    pub path: String,
    /// What it is (a symbolic link is described by its target; see `is_symlink`).
    pub kind: Kind,
    /// Size in bytes (for a folder, the size of the folder record, not of its contents).
    pub size: u64,
    /// Last modification time, RFC 3339 in UTC (absent when the system does not record it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
    /// True when the owner may not write it.
    pub readonly: bool,
    /// True when the path given is a symbolic link (inside the root) to what is described.
    pub is_symlink: bool,
}

/// Formats a system time as RFC 3339 UTC with second precision.
pub fn rfc3339_utc(t: SystemTime) -> Option<String> {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).ok()?,
        Err(e) => -i64::try_from(e.duration().as_secs()).ok()? - i64::from(e.duration().subsec_nanos() > 0),
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    Some(format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60))
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Describes a file or folder.
pub struct FsStat;

impl Tool for FsStat {
    const NAME: &'static str = "fs_stat";
    type Input = StatInput;
    type Output = StatOutput;

    fn call(&self, input: StatInput, cx: &mut Context<'_>) -> Result<StatOutput, ToolError> {
        let root = root_of(cx)?;
        let entry = root.resolve(&input.path, Mode::ENTRY)?;
        let is_symlink = fs::symlink_metadata(&entry).map(|m| m.file_type().is_symlink()).unwrap_or(false);
        let full = if is_symlink { root.resolve(&input.path, Mode::EXISTING)? } else { entry };
        let rel = root.relative(&full);
        let meta = fs::metadata(&full).map_err(|e| io_error(&rel, "stat", &e))?;
        Ok(StatOutput {
            path: rel,
            kind: Kind::of(meta.file_type()),
            size: meta.len(),
            modified: meta.modified().ok().and_then(rfc3339_utc),
            readonly: meta.permissions().readonly(),
            is_symlink,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// fs_edit

/// The change `fs_edit` made, as reported in its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", rename_all = "lowercase")]
#[schemars(crate = "quiver_abi::schemars", inline)]
pub enum EditAction {
    Write,
    Append,
    Move,
    Delete,
}

/// Arguments of the `write` and `append` actions.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct WriteArgs {
    /// The file or folder to change, relative to the root (for `move`: the source).
    pub path: String,
    /// The text to write (UTF-8).
    pub content: String,
    /// Create missing parent folders; default true.
    #[serde(default = "yes")]
    pub create_dirs: bool,
}

/// Arguments of the `move` action.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct MoveArgs {
    /// The file or folder to change, relative to the root (for `move`: the source).
    pub path: String,
    /// The destination path, relative to the root.
    pub to: String,
    /// Replace an existing destination file; default false.
    #[serde(default)]
    pub overwrite: bool,
    /// Create missing parent folders; default true.
    #[serde(default = "yes")]
    pub create_dirs: bool,
}

/// Arguments of the `delete` action.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde", deny_unknown_fields)]
#[schemars(crate = "quiver_abi::schemars")]
pub struct DeleteArgs {
    /// The file or folder to change, relative to the root (for `move`: the source).
    pub path: String,
    /// Delete a folder with everything inside it; default false (only files, links and empty
    /// folders).
    #[serde(default)]
    pub recursive: bool,
}

quiver_abi::actions! {
    /// Arguments of `fs_edit`: the action and its fields (a flat schema with a required
    /// `action`; see `quiver_abi::actions`).
    #[derive(Debug)]
    pub enum EditInput {
        /// Create a file or replace its whole content with `content`.
        #[action(name = "write", side_effects = "write", aliases = ["write_file"])]
        Write(WriteArgs),
        /// Add `content` to the end of a file, creating it when missing.
        #[action(name = "append", side_effects = "write")]
        Append(WriteArgs),
        /// Rename or move `path` to `to` (an existing destination file only with `overwrite`).
        #[action(name = "move", side_effects = "write")]
        Move(MoveArgs),
        /// Delete a file, symbolic link or empty folder (any folder with `recursive`).
        #[action(name = "delete", side_effects = "destructive", confirmation = true, aliases = ["delete_file"])]
        Delete(DeleteArgs),
    }
}

/// Result of `fs_edit`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct EditOutput {
    /// The action performed.
    pub action: EditAction,
    /// The path changed, relative to the root (for `move`: the source).
    pub path: String,
    /// `move`: the new path, relative to the root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// True when the file did not exist before (`write`, `append`).
    pub created: bool,
    /// Bytes written (`write`, `append`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_written: Option<u64>,
    /// Size of the file afterwards (`write`, `append`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Writes, appends to, moves and deletes files.
pub struct FsEdit;

impl FsEdit {
    fn parent_dirs(root: &Root, rel_input: &str, target: &Path, create: bool) -> Result<(), ToolError> {
        let Some(parent) = target.parent() else { return Ok(()) };
        if parent.is_dir() {
            return Ok(());
        }
        if !create {
            return Err(ToolError::not_found(format!(
                "the folder of `{rel_input}` does not exist; pass create_dirs: true or create it first"
            )));
        }
        root.create_dirs(parent)
    }

    fn write(root: &Root, input: &WriteArgs, append: bool) -> Result<EditOutput, ToolError> {
        let action = if append { EditAction::Append } else { EditAction::Write };
        let content = &input.content;
        let target = root.resolve(&input.path, Mode::CREATE)?;
        let rel = root.relative(&target);
        if target == root.path() || target.is_dir() {
            return Err(ToolError::invalid(format!("`{rel}` is a folder; give a file path such as `{rel}/notes.txt`")));
        }
        let created = !target.exists();
        FsEdit::parent_dirs(root, &input.path, &target, input.create_dirs)?;
        // Opened beneath the root handle, never through a final link, hard links refused, and
        // truncated only after those checks (see `confine`).
        let mut flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::NONBLOCK;
        if append {
            flags |= rustix::fs::OFlags::APPEND;
        }
        let mut file = root.open_file(&target, flags, true)?;
        let meta = file.metadata().map_err(|e| io_error(&rel, "open for writing", &e))?;
        if !meta.is_file() {
            return Err(ToolError::invalid(format!("`{rel}` is not a regular file; write to a plain file")));
        }
        if !append {
            file.set_len(0).map_err(|e| io_error(&rel, "truncate", &e))?;
        }
        file.write_all(content.as_bytes()).map_err(|e| io_error(&rel, "write", &e))?;
        file.flush().map_err(|e| io_error(&rel, "write", &e))?;
        let size = file.metadata().map(|m| m.len()).ok();
        Ok(EditOutput { action, path: rel, to: None, created, bytes_written: Some(content.len() as u64), size })
    }

    fn move_entry(root: &Root, input: &MoveArgs) -> Result<EditOutput, ToolError> {
        let to = &input.to;
        let from = root.resolve(&input.path, Mode::ENTRY)?;
        let dest = root.resolve(to, Mode::DESTINATION)?;
        let (rel_from, rel_to) = (root.relative(&from), root.relative(&dest));
        if from == root.path() || dest == root.path() {
            return Err(ToolError::denied("the root folder itself cannot be moved or replaced"));
        }
        if from == dest {
            return Err(ToolError::invalid(format!("`{rel_from}` and `{rel_to}` are the same path")));
        }
        if dest.starts_with(&from) {
            return Err(ToolError::invalid(format!("cannot move folder `{rel_from}` into itself (`{rel_to}`)")));
        }
        if let Ok(existing) = fs::symlink_metadata(&dest) {
            if existing.is_dir() {
                return Err(ToolError::invalid(format!(
                    "destination `{rel_to}` is an existing folder; to move into it, pass `to: \"{rel_to}/<name>\"`"
                )));
            }
            if !input.overwrite {
                return Err(ToolError::invalid(format!(
                    "destination `{rel_to}` already exists; pass overwrite: true to replace it, or choose another name"
                )));
            }
        }
        FsEdit::parent_dirs(root, to, &dest, input.create_dirs)?;
        // Both folders opened beneath the root with no link on the way, then one renameat: a
        // folder swapped for a link since the checks cannot redirect the move.
        let (from_dir, from_name) = root.parent_of(&from)?;
        let (dest_dir, dest_name) = root.parent_of(&dest)?;
        let flags = if input.overwrite { rustix::fs::RenameFlags::empty() } else { rustix::fs::RenameFlags::NOREPLACE };
        rustix::fs::renameat_with(&from_dir, from_name.as_os_str(), &dest_dir, dest_name.as_os_str(), flags).map_err(
            |e| {
                if e == rustix::io::Errno::EXIST {
                    ToolError::invalid(format!(
                        "destination `{rel_to}` already exists; pass overwrite: true to replace it, or choose another name"
                    ))
                } else {
                    root.escaped_doing(&rel_from, &format!("move to `{rel_to}`"), e)
                }
            },
        )?;
        Ok(EditOutput {
            action: EditAction::Move,
            path: rel_from,
            to: Some(rel_to),
            created: false,
            bytes_written: None,
            size: None,
        })
    }

    fn delete(root: &Root, input: &DeleteArgs) -> Result<EditOutput, ToolError> {
        let target = root.resolve(&input.path, Mode::ENTRY)?;
        let rel = root.relative(&target);
        if target == root.path() {
            return Err(ToolError::denied(format!(
                "refusing to delete the root folder `{}` itself; delete the entries inside it",
                root.display()
            )));
        }
        // Everything through handles beneath the root: the entry's folder is opened with no link
        // on the way, the entry itself is never followed (a link is deleted, not its target).
        use rustix::fs::{AtFlags, FileType};
        let (dir, name) = root.parent_of(&target)?;
        let fail = |e: rustix::io::Errno| root.escaped_doing(&rel, "delete", e);
        let st = rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            if input.recursive {
                let inner = rustix::fs::openat2(
                    &dir,
                    name.as_os_str(),
                    rustix::fs::OFlags::RDONLY
                        | rustix::fs::OFlags::DIRECTORY
                        | rustix::fs::OFlags::NOFOLLOW
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                    rustix::fs::ResolveFlags::BENEATH
                        | rustix::fs::ResolveFlags::NO_SYMLINKS
                        | rustix::fs::ResolveFlags::NO_MAGICLINKS,
                )
                .map_err(fail)?;
                root.remove_contents(&inner, &rel)?;
            }
            rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::REMOVEDIR).map_err(|e| {
                if e == rustix::io::Errno::NOTEMPTY {
                    ToolError::invalid(format!(
                        "folder `{rel}` is not empty; pass recursive: true to delete it with its contents"
                    ))
                } else {
                    fail(e)
                }
            })?;
        } else {
            rustix::fs::unlinkat(&dir, name.as_os_str(), AtFlags::empty()).map_err(fail)?;
        }
        Ok(EditOutput {
            action: EditAction::Delete,
            path: rel,
            to: None,
            created: false,
            bytes_written: None,
            size: None,
        })
    }
}

impl Tool for FsEdit {
    const NAME: &'static str = "fs_edit";
    type Input = EditInput;
    type Output = EditOutput;

    fn call(&self, input: EditInput, cx: &mut Context<'_>) -> Result<EditOutput, ToolError> {
        let root = root_of(cx)?;
        let out = match &input {
            EditInput::Write(args) => FsEdit::write(&root, args, false)?,
            EditInput::Append(args) => FsEdit::write(&root, args, true)?,
            EditInput::Move(args) => FsEdit::move_entry(&root, args)?,
            EditInput::Delete(args) => FsEdit::delete(&root, args)?,
        };
        if let Some(n) = out.bytes_written {
            cx.measure("bytes_written", n);
        }
        Ok(out)
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [FsRead, FsList, FsSearch, FsStat, FsEdit],
}

#[cfg(test)]
mod tests;

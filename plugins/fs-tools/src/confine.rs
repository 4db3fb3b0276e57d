//! Confinement: every path a tool touches is resolved against one root folder and refused when
//! it leads outside it.
//!
//! The rules, in order:
//! 1. A relative path is joined to the root; an absolute path is taken as is.
//! 2. `.` and `..` are resolved lexically first; a relative path whose `..` climbs above the root
//!    is refused at once.
//! 3. The deepest part of the path that exists is canonicalized (symlinks resolved by the OS) and
//!    must lie under the canonical root; the parts that do not exist yet are appended to it.
//! 4. A symbolic link that cannot be resolved (dangling, or a loop) is never followed.
//! 5. Tools that act on a directory entry itself (move, delete) do not follow a final symbolic
//!    link: they act on the link, whose folder must be under the root.
//!
//! The check above gives the path and the clear errors; the file is then opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` relative to a handle on the root folder
//! opened when the call started ([`Root::open_file`]), so a folder swapped for a symlink between
//! the check and the open cannot lead out of the root: the kernel refuses the escape (no
//! check-then-use race). Folders are created the same way, one `mkdirat` at a time beneath the
//! root. Moves and deletes act on a handle of the entry's folder opened beneath the root with no
//! symbolic link on the way (`renameat`, `unlinkat`; a recursive delete walks the tree through
//! handles, never following a link), so a swapped folder cannot redirect them either. A regular file with more than one hard link is refused for reading and writing (a hard
//! link to a file outside the root is indistinguishable from the file itself), unless the
//! configuration sets `allow_hard_links: true`.

use std::{
    ffi::OsString,
    fs,
    io::ErrorKind,
    os::fd::OwnedFd,
    os::unix::fs::MetadataExt,
    path::{Component, Path, PathBuf},
    sync::Arc,
};

use rustix::fs::{Mode as FileMode, OFlags, ResolveFlags};

use quiver_abi::{ToolError, serde_json::Value};

/// Environment variable naming the root when the plugin configuration has none.
pub const ROOT_ENV: &str = "QUIVER_FS_ROOT";

/// How a path is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    /// The path must exist (else `not_found`).
    pub must_exist: bool,
    /// A final symbolic link is followed (its target must be under the root); when false the
    /// link itself is the result.
    pub follow_final: bool,
}

impl Mode {
    /// Read something that exists, following symlinks.
    pub const EXISTING: Mode = Mode { must_exist: true, follow_final: true };
    /// Write a file that may not exist yet, writing through a symlink whose target is inside.
    pub const CREATE: Mode = Mode { must_exist: false, follow_final: true };
    /// Act on an existing directory entry itself (delete, move source).
    pub const ENTRY: Mode = Mode { must_exist: true, follow_final: false };
    /// A new name for an entry (move destination).
    pub const DESTINATION: Mode = Mode { must_exist: false, follow_final: false };
}

/// The canonical root folder of this call, and a handle on it that every open goes through.
#[derive(Debug, Clone)]
pub struct Root {
    path: PathBuf,
    dir: Arc<OwnedFd>,
    allow_hard_links: bool,
}

impl Root {
    /// The root from the plugin configuration (`root`), else [`ROOT_ENV`], else the current
    /// directory.
    pub fn from_config(config: &Value) -> Result<Root, ToolError> {
        let (raw, source) = match config.get("root") {
            Some(Value::String(s)) if !s.trim().is_empty() => (PathBuf::from(s), "plugin_config.fs-tools.root"),
            None | Some(Value::Null) => match std::env::var_os(ROOT_ENV) {
                Some(v) if !v.is_empty() => (PathBuf::from(v), ROOT_ENV),
                _ => {
                    let cwd = std::env::current_dir().map_err(|e| {
                        ToolError::tool(format!(
                            "no root is configured (plugin_config.fs-tools.root or {ROOT_ENV}) and the current \
                             directory cannot be read: {e}"
                        ))
                    })?;
                    (cwd, "the current directory")
                }
            },
            Some(other) => {
                return Err(ToolError::tool(format!(
                    "plugin_config.fs-tools.root must be a non-empty string path, not {other}; fix the host configuration"
                )));
            }
        };
        let mut root = Root::new(&raw).map_err(|e| {
            ToolError::tool(format!(
                "the fs-tools root `{}` (from {source}) cannot be used: {}; fix the host configuration",
                raw.display(),
                e.message
            ))
        })?;
        root.allow_hard_links = match config.get("allow_hard_links") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ToolError::tool(format!(
                    "plugin_config.fs-tools.allow_hard_links must be true or false, not {other}; fix the host configuration"
                )));
            }
        };
        Ok(root)
    }

    /// A root at `path`, which must be an existing folder.
    pub fn new(path: &Path) -> Result<Root, ToolError> {
        let canonical = fs::canonicalize(path).map_err(|e| ToolError::tool(e.to_string()))?;
        if !canonical.is_dir() {
            return Err(ToolError::tool("it is not a folder"));
        }
        let dir = rustix::fs::open(&canonical, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, FileMode::empty())
            .map_err(|e| ToolError::tool(format!("cannot open it: {e}")))?;
        Ok(Root { path: canonical, dir: Arc::new(dir), allow_hard_links: false })
    }

    /// `full` (a path [`Root::resolve`] returned) relative to the root, for `*at` calls.
    fn beneath<'p>(&self, full: &'p Path) -> &'p Path {
        match full.strip_prefix(&self.path) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel,
            _ => Path::new("."),
        }
    }

    fn escaped(&self, rel: &str, e: rustix::io::Errno) -> ToolError {
        if e == rustix::io::Errno::XDEV || e == rustix::io::Errno::LOOP {
            ToolError::denied(format!(
                "`{rel}` led out of the root `{}` when it was opened (a folder on the way was replaced by a \
                 symbolic link, or it goes through a link that leaves the root); nothing was read or written",
                self.display()
            ))
        } else if e == rustix::io::Errno::NOSYS {
            ToolError::tool("this kernel lacks openat2 (Linux 5.6 or later is needed for safe confinement)")
        } else {
            io_error(rel, "open", &std::io::Error::from(e))
        }
    }

    /// Opens `full` beneath the root handle: the kernel refuses any resolution that leaves the
    /// root, whatever was swapped in since [`Root::resolve`]. `no_follow` refuses a final
    /// symbolic link. A regular file with several hard links is refused unless allowed.
    pub fn open_file(&self, full: &Path, flags: OFlags, no_follow: bool) -> Result<fs::File, ToolError> {
        let rel = self.relative(full);
        let mut how = OFlags::CLOEXEC | OFlags::NOCTTY | flags;
        if no_follow {
            how |= OFlags::NOFOLLOW;
        }
        let fd = rustix::fs::openat2(
            &*self.dir,
            self.beneath(full),
            how,
            // openat2 refuses a mode without O_CREAT.
            if how.contains(OFlags::CREATE) { FileMode::from_raw_mode(0o666) } else { FileMode::empty() },
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| self.escaped(&rel, e))?;
        let file = fs::File::from(fd);
        let meta = file.metadata().map_err(|e| io_error(&rel, "stat", &e))?;
        if meta.is_file() && meta.nlink() > 1 && !self.allow_hard_links {
            return Err(ToolError::denied(format!(
                "`{rel}` has {} hard links, so it may be a file outside the root `{}` linked in; fs-tools does not \
                 read or write such files (the host may set plugin_config.fs-tools.allow_hard_links: true)",
                meta.nlink(),
                self.display()
            )));
        }
        Ok(file)
    }

    /// Creates the folder `full` and its missing parents, one `mkdirat` at a time, each step
    /// opened beneath the root without following links.
    pub fn create_dirs(&self, full: &Path) -> Result<(), ToolError> {
        let rel_text = self.relative(full);
        let mut current: Arc<OwnedFd> = self.dir.clone();
        for part in self.beneath(full).components() {
            let Component::Normal(name) = part else { continue };
            match rustix::fs::mkdirat(&*current, name, FileMode::from_raw_mode(0o777)) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::EXIST => {}
                Err(e) => return Err(self.escaped(&rel_text, e)),
            }
            let next = rustix::fs::openat2(
                &*current,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                FileMode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
            )
            .map_err(|e| self.escaped(&rel_text, e))?;
            current = Arc::new(next);
        }
        Ok(())
    }

    /// The folder holding `full` (a path [`Root::resolve`] returned: canonical, so no symbolic
    /// link on the way), opened beneath the root with no symbolic link allowed anywhere, and the
    /// entry's name in it: what `renameat`/`unlinkat` act on. A folder swapped for a link since
    /// the check makes the open fail instead of leading elsewhere.
    pub fn parent_of(&self, full: &Path) -> Result<(OwnedFd, OsString), ToolError> {
        let rel = self.relative(full);
        let beneath = self.beneath(full);
        let name = beneath
            .file_name()
            .filter(|_| beneath != Path::new("."))
            .ok_or_else(|| ToolError::denied("the root folder itself cannot be moved or deleted"))?
            .to_owned();
        let parent = beneath.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let fd = rustix::fs::openat2(
            &*self.dir,
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            FileMode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| self.escaped(&rel, e))?;
        Ok((fd, name))
    }

    /// Deletes everything inside the folder `dir` (a handle opened beneath the root), depth
    /// first, through handles: sub-folders are opened with no symbolic link allowed, links are
    /// removed, never followed.
    pub fn remove_contents(&self, dir: &OwnedFd, rel: &str) -> Result<(), ToolError> {
        use rustix::fs::{AtFlags, FileType};
        let fail = |doing: &str, e: rustix::io::Errno| self.escaped_doing(rel, doing, e);
        let mut names = Vec::new();
        let mut entries = rustix::fs::Dir::read_from(dir).map_err(|e| fail("list", e))?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| fail("list", e))?;
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                names.push(name.to_owned());
            }
        }
        for name in names {
            let st =
                rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).map_err(|e| fail("delete", e))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                let child = rustix::fs::openat2(
                    dir,
                    name.as_c_str(),
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    FileMode::empty(),
                    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
                )
                .map_err(|e| fail("delete", e))?;
                self.remove_contents(&child, rel)?;
                rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR).map_err(|e| fail("delete", e))?;
            } else {
                rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty()).map_err(|e| fail("delete", e))?;
            }
        }
        Ok(())
    }

    /// [`Root::escaped`] for an operation other than opening.
    pub fn escaped_doing(&self, rel: &str, doing: &str, e: rustix::io::Errno) -> ToolError {
        if e == rustix::io::Errno::XDEV || e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
            self.escaped(rel, rustix::io::Errno::XDEV)
        } else {
            io_error(rel, doing, &std::io::Error::from(e))
        }
    }

    /// The canonical root path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root as shown in messages.
    pub fn display(&self) -> String {
        self.path.display().to_string()
    }

    /// `p` (under the root) relative to the root with `/` separators; `.` for the root itself.
    pub fn relative(&self, p: &Path) -> String {
        match p.strip_prefix(&self.path) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>().join("/"),
            Err(_) => p.display().to_string(),
        }
    }

    fn outside(&self, input: &str, why: &str) -> ToolError {
        ToolError::denied(format!(
            "path `{input}` is outside the root `{}` ({why}); fs-tools only reaches files under the root: \
             use a path relative to it, such as `notes.txt` or `src/lib.rs`",
            self.display()
        ))
        .with_details(quiver_abi::serde_json::json!({ "path": input, "root": self.display() }))
    }

    /// Resolves `input` under the root; see the module documentation for the rules.
    pub fn resolve(&self, input: &str, mode: Mode) -> Result<PathBuf, ToolError> {
        if input.contains('\0') {
            return Err(ToolError::invalid("the path contains a NUL character; pass a plain path"));
        }
        let requested = Path::new(if input.trim().is_empty() { "." } else { input });
        let absolute = requested.is_absolute();

        // Lexical normalization of `.` and `..`.
        let mut parts: Vec<OsString> = Vec::new();
        for c in requested.components() {
            match c {
                Component::Prefix(_) | Component::RootDir => parts.clear(),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() && !absolute {
                        return Err(self.outside(input, "its `..` climbs above the root"));
                    }
                }
                Component::Normal(s) => parts.push(s.to_owned()),
            }
        }
        let start = if absolute { PathBuf::from("/") } else { self.path.clone() };

        // The deepest existing prefix (lstat: a final symlink counts as existing).
        let mut existing = parts.len();
        let base = loop {
            let candidate: PathBuf = parts[..existing].iter().fold(start.clone(), |p, s| p.join(s));
            if fs::symlink_metadata(&candidate).is_ok() || existing == 0 {
                break candidate;
            }
            existing -= 1;
        };
        let tail = &parts[existing..];
        if mode.must_exist && !tail.is_empty() {
            // Refuse escapes before saying "not found", so nothing outside is probed.
            self.canonical_inside(input, &base)?;
            let missing: PathBuf = parts[..=existing].iter().fold(start.clone(), |p, s| p.join(s));
            return Err(ToolError::not_found(format!(
                "`{input}` does not exist under the root `{}` (`{}` is missing); list the folder with fs_list to see \
                 what is there",
                self.display(),
                self.relative_or_raw(&missing)
            )));
        }

        let is_link = fs::symlink_metadata(&base).map(|m| m.file_type().is_symlink()).unwrap_or(false);
        if tail.is_empty() && is_link && !mode.follow_final {
            // Act on the link itself: its folder must be under the root.
            let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
                return Err(self.outside(input, "it names no entry"));
            };
            return Ok(self.canonical_inside(input, parent)?.join(name));
        }
        let resolved = self.canonical_inside(input, &base)?;
        Ok(tail.iter().fold(resolved, |p, s| p.join(s)))
    }

    /// Canonicalizes an existing path and checks that it is under the root.
    fn canonical_inside(&self, input: &str, existing: &Path) -> Result<PathBuf, ToolError> {
        let canonical = match fs::canonicalize(existing) {
            Ok(c) => c,
            Err(e) => {
                let is_link = fs::symlink_metadata(existing).map(|m| m.file_type().is_symlink()).unwrap_or(false);
                if is_link || matches!(e.kind(), ErrorKind::NotFound) {
                    return Err(ToolError::denied(format!(
                        "`{input}` goes through a symbolic link that cannot be resolved (its target is missing or it \
                         loops); fs-tools never follows such links. Use the link's target path instead, or delete the \
                         link with fs_edit"
                    )));
                }
                return Err(io_error(input, "resolve", &e));
            }
        };
        if !canonical.starts_with(&self.path) {
            let why = if existing.starts_with(&self.path) {
                "a symbolic link on the way leads out of it"
            } else {
                "it leads out of the root"
            };
            return Err(self.outside(input, why));
        }
        Ok(canonical)
    }

    fn relative_or_raw(&self, p: &Path) -> String {
        match fs::canonicalize(p.parent().unwrap_or(p)) {
            Ok(parent) if parent.starts_with(&self.path) => {
                let joined = match p.file_name() {
                    Some(n) => parent.join(n),
                    None => parent,
                };
                self.relative(&joined)
            }
            _ => p.display().to_string(),
        }
    }
}

/// Maps an I/O error to a tool error a model can act on.
pub fn io_error(path: &str, doing: &str, e: &std::io::Error) -> ToolError {
    match e.kind() {
        ErrorKind::NotFound => {
            ToolError::not_found(format!("cannot {doing} `{path}`: it does not exist; check the path with fs_list"))
        }
        ErrorKind::PermissionDenied => ToolError::denied(format!(
            "cannot {doing} `{path}`: the operating system denied access ({e}); choose a file the host may access"
        )),
        ErrorKind::IsADirectory => {
            ToolError::invalid(format!("cannot {doing} `{path}`: it is a folder; use fs_list to see its contents"))
        }
        ErrorKind::NotADirectory => {
            ToolError::invalid(format!("cannot {doing} `{path}`: a part of the path is a file, not a folder"))
        }
        _ => ToolError::tool(format!("cannot {doing} `{path}`: {e}")),
    }
}

//! A deterministic depth-first folder walk: entries sorted by name, symbolic links reported but
//! never entered, hidden names skipped unless asked for.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::Kind;

/// One entry found by the walk.
#[derive(Debug)]
pub struct WalkItem {
    /// Full path (under the walked folder).
    pub path: PathBuf,
    /// Kind of the entry itself (a link is `Symlink`).
    pub kind: Kind,
    /// Size, for files.
    pub size: Option<u64>,
}

/// Walks a folder depth first, in name order.
pub struct Walk {
    /// Pending entries of each open folder, reversed so the next one is at the end.
    stack: Vec<Vec<WalkItem>>,
    max_depth: u32,
    include_hidden: bool,
    /// Folders that could not be read.
    pub unreadable: u64,
}

impl Walk {
    /// A walk of `dir`'s contents down to `max_depth` levels (1 = direct children only).
    pub fn new(dir: &Path, max_depth: u32, include_hidden: bool) -> Walk {
        let mut walk = Walk { stack: Vec::new(), max_depth, include_hidden, unreadable: 0 };
        walk.open(dir);
        walk
    }

    fn open(&mut self, dir: &Path) {
        let Ok(read) = fs::read_dir(dir) else {
            self.unreadable += 1;
            self.stack.push(Vec::new());
            return;
        };
        let mut items: Vec<(String, WalkItem)> = read
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                if !self.include_hidden && name.starts_with('.') {
                    return None;
                }
                let ft = e.file_type().ok()?;
                let kind = Kind::of(ft);
                let size = if kind == Kind::File { e.metadata().ok().map(|m| m.len()) } else { None };
                Some((name, WalkItem { path: e.path(), kind, size }))
            })
            .collect();
        items.sort_by(|a, b| b.0.cmp(&a.0));
        self.stack.push(items.into_iter().map(|(_, item)| item).collect());
    }

    /// The next entry, or `None` when the walk is done.
    pub fn next_item(&mut self) -> Option<WalkItem> {
        loop {
            let depth = self.stack.len() as u32;
            let top = self.stack.last_mut()?;
            let Some(item) = top.pop() else {
                self.stack.pop();
                continue;
            };
            if item.kind == Kind::Dir && depth < self.max_depth {
                self.open(&item.path);
            }
            return Some(item);
        }
    }
}

//! Records of checks this host build already made on exactly some bytes (a configuration text,
//! a signed manifest, a kept load report against its manifest), so a later start can skip
//! repeating them. A record is a digest of what was checked and of the host's version, one line
//! of a state folder's record log ([`RecordLog`], `state_dir/checked.log`); any other bytes or
//! another build never match, and a missing, unreadable or dropped record only means the check
//! runs again. Records never stand in for a check made before a call reaches a plugin (see
//! docs/ARCHITECTURE.md, "Start-up").

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The digest a record of the check `kind` of `parts` holds: the sha256 of `kind`, this host's
/// version and each part, separated by NUL bytes.
pub fn digest(kind: &str, parts: &[&[u8]]) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut bytes =
        Vec::with_capacity(kind.len() + version.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>() + 1);
    bytes.extend_from_slice(kind.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(version.as_bytes());
    for part in parts {
        bytes.push(0);
        bytes.extend_from_slice(part);
    }
    quiver_manifest::sha256_hex(&bytes)
}

/// The record log of a state folder: the file name in it.
pub const LOG_FILE: &str = "checked.log";

/// A log this large (about 16,000 records) is started afresh when it is opened: records are
/// only a cache of checks, so the cost is one full check of what is read next.
const MAX_LOG_BYTES: u64 = 1 << 20;

/// An append-only file of record digests, one 64-hex-digit line each, read once per process.
/// A record is added with one append (`O_APPEND`: a line is written whole even when several
/// processes share the folder), so a start that checks many bundles creates no file per check.
/// Lines that are not a digest (a torn write) are ignored.
#[derive(Debug)]
pub struct RecordLog {
    file: PathBuf,
    state: Mutex<Option<Loaded>>,
}

#[derive(Debug)]
struct Loaded {
    digests: HashSet<String>,
    append: Option<fs::File>,
}

/// The record log `file` of this process (one per file, read on first use).
pub fn log(file: &Path) -> Arc<RecordLog> {
    static LOGS: Mutex<Vec<Arc<RecordLog>>> = Mutex::new(Vec::new());
    let mut logs = LOGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(log) = logs.iter().find(|l| l.file == file) {
        return Arc::clone(log);
    }
    let log = Arc::new(RecordLog { file: file.to_owned(), state: Mutex::new(None) });
    logs.push(Arc::clone(&log));
    log
}

impl RecordLog {
    /// Whether the log holds `digest`.
    pub fn contains(&self, digest: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.get_or_insert_with(|| self.load()).digests.contains(digest)
    }

    /// Adds `digest` (best effort: an error means the check runs again next time). The log's
    /// folder and file are made if needed, once per process (when the file is first opened).
    /// Anything but a [`digest`] (64 hex digits) is refused.
    pub fn add(&self, digest: &str) -> io::Result<()> {
        if !is_digest(digest) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a record is a sha256 digest (64 hex digits)"));
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let loaded = state.get_or_insert_with(|| self.load());
        if loaded.digests.contains(digest) {
            return Ok(());
        }
        if loaded.append.is_none() {
            if let Some(dir) = self.file.parent() {
                fs::create_dir_all(dir)?;
            }
            loaded.append = Some(fs::OpenOptions::new().append(true).create(true).open(&self.file)?);
        }
        let mut line = String::with_capacity(digest.len() + 1);
        line.push_str(digest);
        line.push('\n');
        loaded.append.as_mut().expect("opened above").write_all(line.as_bytes())?;
        loaded.digests.insert(digest.to_owned());
        Ok(())
    }

    fn load(&self) -> Loaded {
        let mut digests = HashSet::new();
        match fs::metadata(&self.file) {
            Ok(meta) if meta.len() > MAX_LOG_BYTES => {
                let _ = write(&self.file, b"");
            }
            Ok(_) => {
                if let Ok(text) = fs::read_to_string(&self.file) {
                    digests.extend(text.lines().filter(|l| is_digest(l)).map(str::to_owned));
                }
            }
            Err(_) => {}
        }
        Loaded { digests, append: None }
    }
}

/// Whether `line` is a record digest: 64 hex digits.
fn is_digest(line: &str) -> bool {
    line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Writes `file` whole, through a temporary file next to it and a rename (a reader never sees
/// half a file). The folder must exist.
pub fn write(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, file));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log as a new process opens it (not this process's shared one).
    fn fresh(file: &Path) -> RecordLog {
        RecordLog { file: file.to_owned(), state: Mutex::new(None) }
    }

    #[test]
    fn a_record_is_one_appended_line_that_a_later_process_reads() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LOG_FILE);
        let (a, b) = (digest("kind", &[b"a"]), digest("kind", &[b"b"]));
        assert_ne!(a, b);
        assert_ne!(a, digest("other kind", &[b"a"]), "the kind of check is part of the digest");
        let log = log(&file);
        assert!(Arc::ptr_eq(&log, &super::log(&file)), "one log per file in a process");
        assert!(!log.contains(&a) && !file.exists(), "looking creates nothing");
        log.add(&a).unwrap();
        log.add(&a).unwrap();
        assert!(log.contains(&a) && !log.contains(&b));
        assert_eq!(fs::read_to_string(&file).unwrap(), format!("{a}\n"), "a record is written once");
        let later = fresh(&file);
        assert!(later.contains(&a) && !later.contains(&b));
        later.add(&b).unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), format!("{a}\n{b}\n"));
        // A torn or foreign line matches nothing and hides nothing after it.
        let c = digest("kind", &[b"c"]);
        let mut text = fs::read_to_string(&file).unwrap();
        text.push_str(&a[..20]);
        text.push_str(&format!("{c}\nnot a digest\n"));
        fs::write(&file, text).unwrap();
        let torn = fresh(&file);
        assert!(torn.contains(&a) && torn.contains(&b) && !torn.contains(&c) && !torn.contains(&a[..20]));
        // Only digests are written: a line break or another length could forge or tear a line.
        for bad in [format!("{a}\n{b}"), a[..63].to_owned(), format!("{}g", &a[..63])] {
            assert_eq!(torn.add(&bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn records_appended_by_many_writers_stay_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LOG_FILE);
        let writers: Vec<RecordLog> = (0..4).map(|_| fresh(&file)).collect();
        std::thread::scope(|s| {
            for (w, log) in writers.iter().enumerate() {
                s.spawn(move || {
                    for i in 0..200 {
                        log.add(&digest("kind", &[format!("{w}-{i}").as_bytes()])).unwrap();
                    }
                });
            }
        });
        let reader = fresh(&file);
        for w in 0..4 {
            for i in 0..200 {
                assert!(reader.contains(&digest("kind", &[format!("{w}-{i}").as_bytes()])), "{w}-{i}");
            }
        }
        assert_eq!(fs::read_to_string(&file).unwrap().lines().count(), 800);
    }

    #[test]
    fn an_oversized_log_is_started_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LOG_FILE);
        let kept = digest("kind", &[b"kept"]);
        let mut text = String::new();
        while text.len() as u64 <= MAX_LOG_BYTES {
            text.push_str(&kept);
            text.push('\n');
        }
        fs::write(&file, text).unwrap();
        let log = fresh(&file);
        assert!(!log.contains(&kept), "an oversized log's records are dropped");
        assert_eq!(fs::metadata(&file).unwrap().len(), 0);
        log.add(&kept).unwrap();
        assert!(fresh(&file).contains(&kept));
    }
}

//! The rollback record: the highest version of each plugin id ever accepted, with its sha256,
//! kept in the state folder so a restart does not forget it (issue 10: after a restart a lower
//! signed version loaded again).
//!
//! `state_dir/rollback.json` holds the record; it is rewritten atomically (new file, `fsync`,
//! rename) once per scan that raised it. Rolling back on purpose is an explicit operator act
//! ([`RollbackStore::allow_rollback`], `quiver rollback PLUGIN_ID --reason ...`): it drops the
//! record for one id, logs a warning and appends a line to `state_dir/rollback.log`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// File of the record, in the state folder.
pub const ROLLBACK_FILE: &str = "rollback.json";
/// Append-only log of deliberate rollbacks, in the state folder.
pub const ROLLBACK_LOG: &str = "rollback.log";

/// Largest record file read (a few hundred bytes per plugin).
const MAX_RECORD_BYTES: u64 = 8 << 20;

/// The highest accepted version of one plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The version (semver).
    pub version: String,
    /// sha256 of its library.
    pub sha256: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RecordFile {
    /// Format version.
    format: u32,
    plugins: BTreeMap<String, Accepted>,
}

/// Creates the state folder `dir` (mode 0700) if it is missing.
fn create_state_dir(dir: &Path) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create the state folder {}: {e}", dir.display()))
}

/// The persistent rollback record of one host.
#[derive(Debug)]
pub struct RollbackStore {
    dir: PathBuf,
    plugins: Mutex<BTreeMap<String, Accepted>>,
    /// False for a store that only checks ([`RollbackStore::checking`]).
    raises: bool,
    /// Record files written (tests: one write per scan).
    #[cfg(test)]
    pub(crate) writes: std::sync::atomic::AtomicUsize,
}

impl RollbackStore {
    /// Opens (creating, mode 0700) the state folder and reads the record. A record that exists
    /// but cannot be read or parsed is an error: starting with an empty record would silently
    /// re-open every downgrade.
    pub fn open(dir: &Path) -> Result<RollbackStore, String> {
        create_state_dir(dir)?;
        RollbackStore::read(dir, true)
    }

    /// The record of the state folder `dir` for a host that only checks against it and never
    /// raises it ([`RollbackStore::record_all`] writes nothing): commands that inspect plugins
    /// (`quiver list`, `surface`, `call`, ...) may be pointed at another folder (`--plugins`), and
    /// a newer version seen there must not lock the served one out. A missing folder or record
    /// is an empty record (nothing is created); an unreadable one is an error, as for
    /// [`RollbackStore::open`].
    pub fn checking(dir: &Path) -> Result<RollbackStore, String> {
        RollbackStore::read(dir, false)
    }

    /// This record, raised from now on by what the host accepts (as [`RollbackStore::open`],
    /// without reading the file again); creates the state folder.
    pub fn raising(self) -> Result<RollbackStore, String> {
        create_state_dir(&self.dir)?;
        Ok(RollbackStore { raises: true, ..self })
    }

    /// Reads the record of `dir` (none yet: an empty record).
    fn read(dir: &Path, raises: bool) -> Result<RollbackStore, String> {
        let file = dir.join(ROLLBACK_FILE);
        let plugins = match crate::bundle::read_capped(&file, MAX_RECORD_BYTES) {
            Ok((bytes, _)) => {
                let record: RecordFile = serde_json::from_slice(&bytes).map_err(|e| {
                    format!(
                        "the rollback record {} is corrupted ({e}); restore it from a backup, or delete it to start over (this forgets which versions were accepted)",
                        file.display()
                    )
                })?;
                record.plugins
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read the rollback record {}: {e}", file.display())),
        };
        Ok(RollbackStore {
            dir: dir.to_owned(),
            plugins: Mutex::new(plugins),
            raises,
            #[cfg(test)]
            writes: Default::default(),
        })
    }

    /// The state folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The highest accepted version of `id`, if any.
    pub fn get(&self, id: &str) -> Option<Accepted> {
        self.plugins.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }

    /// May `id` at `version` with library `sha256` load? Refused: a version lower than the
    /// record; under `strict`, the recorded version with other bytes (a re-sign of a released
    /// version). Without `strict` the latter is allowed with a warning (development rebuilds).
    pub fn check(&self, id: &str, version: &semver::Version, sha256: &str, strict: bool) -> Result<(), String> {
        let Some(rec) = self.get(id) else { return Ok(()) };
        let Ok(highest) = semver::Version::parse(&rec.version) else {
            return Err(format!(
                "the rollback record for `{id}` holds an unreadable version `{}`; run `quiver rollback {id} --reason ...` to reset it",
                rec.version
            ));
        };
        if *version < highest {
            return Err(format!(
                "version {version} is lower than {highest}, the highest version of `{id}` this host has accepted (rollback record in {}); downgrades are refused. To roll back on purpose run `quiver rollback {id} --reason \"...\"`",
                self.dir.display()
            ));
        }
        if *version == highest && !sha256.eq_ignore_ascii_case(&rec.sha256) {
            let message = format!(
                "version {version} of `{id}` was accepted before with library sha256 {} and now has {sha256}: a released version was rebuilt or re-signed",
                rec.sha256
            );
            if strict {
                return Err(format!("{message}; bump the version (refused because `strict` is on)"));
            }
            tracing::warn!(plugin = %id, "{message}");
        }
        Ok(())
    }

    /// Records that `id` at `version` (library `sha256`) was accepted; only raises the record
    /// (a same-version rebuild accepted outside `strict` updates the sha256).
    pub fn record(&self, id: &str, version: &semver::Version, sha256: &str) -> Result<(), String> {
        self.record_all([(id, version, sha256)])
    }

    /// Records every accepted `(id, version, sha256)` of one scan and rewrites the file once
    /// (one `fsync` per scan, not per bundle: at start-up every bundle is accepted in the same
    /// scan). Only raises the record; nothing is written when nothing was raised, nor ever by a
    /// store that only checks ([`RollbackStore::checking`]).
    pub fn record_all<'a>(
        &self,
        accepted: impl IntoIterator<Item = (&'a str, &'a semver::Version, &'a str)>,
    ) -> Result<(), String> {
        if !self.raises {
            return Ok(());
        }
        let mut plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        let mut raised = false;
        for (id, version, sha256) in accepted {
            if let Some(rec) = plugins.get(id)
                && let Ok(highest) = semver::Version::parse(&rec.version)
                && (*version < highest || (*version == highest && rec.sha256 == sha256))
            {
                continue;
            }
            plugins.insert(id.to_owned(), Accepted { version: version.to_string(), sha256: sha256.to_owned() });
            raised = true;
        }
        if raised { self.persist(&plugins) } else { Ok(()) }
    }

    /// Rolls back on purpose: forgets the record of `id`, so the next scan accepts any signed
    /// version of it (which becomes the new record). Logged as a warning and appended to
    /// `rollback.log` with the reason. Returns the forgotten record.
    pub fn allow_rollback(&self, id: &str, reason: &str) -> Result<Option<Accepted>, String> {
        let mut plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        let removed = plugins.remove(id);
        self.persist(&plugins)?;
        let when = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let line = serde_json::json!({
            "unix_time": when,
            "plugin": id,
            "forgotten": removed,
            "reason": reason,
            "user": std::env::var("USER").unwrap_or_default(),
        });
        let log = self.dir.join(ROLLBACK_LOG);
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log)
            .map_err(|e| format!("cannot write {}: {e}", log.display()))?;
        writeln!(f, "{line}").map_err(|e| format!("cannot write {}: {e}", log.display()))?;
        tracing::warn!(plugin = %id, forgotten = ?removed, reason = %reason, "rollback allowed on purpose: the next scan accepts a lower version of this plugin");
        Ok(removed)
    }

    fn persist(&self, plugins: &BTreeMap<String, Accepted>) -> Result<(), String> {
        #[cfg(test)]
        self.writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = self.dir.join(ROLLBACK_FILE);
        let record = RecordFile { format: 1, plugins: plugins.clone() };
        let bytes = serde_json::to_vec_pretty(&record).map_err(|e| e.to_string())?;
        let tmp = self.dir.join(format!(".{ROLLBACK_FILE}.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let _ = fs::remove_file(&tmp);
            let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &file)?;
            fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|e| format!("cannot write the rollback record {}: {e}", file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    #[test]
    fn the_record_survives_a_restart_and_refuses_downgrades() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = RollbackStore::open(&state).unwrap();
        store.check("p", &v("1.0.0"), "aa", true).unwrap();
        store.record("p", &v("1.2.0"), "bb").unwrap();
        store.record("p", &v("1.1.0"), "cc").unwrap(); // never lowers
        drop(store);

        let store = RollbackStore::open(&state).unwrap();
        assert_eq!(store.get("p"), Some(Accepted { version: "1.2.0".into(), sha256: "bb".into() }));
        let e = store.check("p", &v("1.1.0"), "cc", true).unwrap_err();
        assert!(e.contains("lower than 1.2.0") && e.contains("quiver rollback p"), "{e}");
        store.check("p", &v("1.2.0"), "bb", true).unwrap();
        store.check("p", &v("1.3.0"), "dd", true).unwrap();
        let e = store.check("p", &v("1.2.0"), "ee", true).unwrap_err();
        assert!(e.contains("re-signed") && e.contains("strict"), "{e}");
        store.check("p", &v("1.2.0"), "ee", false).unwrap();
        store.check("other", &v("0.0.1"), "ff", true).unwrap();

        // A deliberate rollback is logged and lets a lower version in.
        let forgotten = store.allow_rollback("p", "bad release 1.2.0").unwrap();
        assert_eq!(forgotten.unwrap().version, "1.2.0");
        store.check("p", &v("1.1.0"), "cc", true).unwrap();
        let log = fs::read_to_string(state.join(ROLLBACK_LOG)).unwrap();
        assert!(log.contains("bad release 1.2.0") && log.contains("\"plugin\":\"p\""), "{log}");
        drop(store);
        assert_eq!(RollbackStore::open(&state).unwrap().get("p"), None);
    }

    #[test]
    fn a_corrupted_or_hostile_record_is_an_error_not_an_empty_record() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(ROLLBACK_FILE), "{not json").unwrap();
        assert!(RollbackStore::open(dir.path()).unwrap_err().contains("corrupted"));
        let dir = tempfile::tempdir().unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, dir.path().join(ROLLBACK_FILE), rustix::fs::Mode::from_raw_mode(0o600))
            .unwrap();
        let e = RollbackStore::open(dir.path()).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
    }
}

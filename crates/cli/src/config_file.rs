//! Where the host configuration comes from. In order: `--config FILE` (or `QUIVER_CONFIG`),
//! `./quiver.yaml`, `$XDG_CONFIG_HOME/quiver/quiver.yaml` (`~/.config/quiver/quiver.yaml` when
//! `XDG_CONFIG_HOME` is unset or not absolute, as the XDG base-directory specification says),
//! else the built-in defaults. Finds the file, and parses it once per process
//! ([`parse`]: the logging set-up and the settings read the same file); resolving it is
//! [`crate::settings`]'s job.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use quiver_manifest::{HostConfig, ManifestError};

use anyhow::{Result, bail};

/// The configuration file looked for in the working folder and the XDG config folder.
pub const CONFIG_FILE: &str = "quiver.yaml";

/// How the configuration file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Named by `--config` or `QUIVER_CONFIG`.
    Explicit,
    /// `./quiver.yaml` in the working folder.
    WorkingDir,
    /// `quiver/quiver.yaml` in the user's XDG config folder.
    UserConfig,
}

impl Origin {
    /// Says where it came from, for humans and `--json`.
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Explicit => "--config / QUIVER_CONFIG",
            Origin::WorkingDir => "./quiver.yaml",
            Origin::UserConfig => "XDG config folder",
        }
    }
}

/// The user's configuration file path (whether or not it exists), from the environment given:
/// `$XDG_CONFIG_HOME/quiver/quiver.yaml`, else `$HOME/.config/quiver/quiver.yaml`; `None` when
/// neither variable gives an absolute folder.
pub fn user_config_path(xdg_config_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let base = match xdg_config_home.map(Path::new) {
        Some(p) if p.is_absolute() => p.to_path_buf(),
        _ => Path::new(home.filter(|h| Path::new(h).is_absolute())?).join(".config"),
    };
    Some(base.join("quiver").join(CONFIG_FILE))
}

/// Finds the configuration file: `explicit` (must exist), else `cwd/quiver.yaml`, else the
/// user's XDG config file; `None` means the built-in defaults. The path is returned as it should
/// be shown (`quiver.yaml` for the working folder's).
pub fn locate(explicit: Option<&Path>, cwd: &Path) -> Result<Option<(PathBuf, Origin)>> {
    if let Some(path) = explicit {
        if !path.is_file() {
            let what = if path.is_dir() { "is a folder, not a file" } else { "does not exist" };
            bail!(
                "configuration file {} {what}; pass an existing file to --config (or QUIVER_CONFIG), or leave \
                 both out to use ./{CONFIG_FILE}, the XDG config folder's quiver/{CONFIG_FILE} or the built-in defaults",
                path.display()
            );
        }
        return Ok(Some((path.to_path_buf(), Origin::Explicit)));
    }
    if cwd.join(CONFIG_FILE).is_file() {
        return Ok(Some((PathBuf::from(CONFIG_FILE), Origin::WorkingDir)));
    }
    let xdg = std::env::var("XDG_CONFIG_HOME").ok();
    let home = std::env::var("HOME").ok();
    if let Some(user) = user_config_path(xdg.as_deref(), home.as_deref())
        && user.is_file()
    {
        return Ok(Some((user, Origin::UserConfig)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The logging set-up and the settings read the same file: it is parsed once. Changed text
    /// is parsed again, and a bad file is not remembered (its error is reported each time).
    #[test]
    fn the_same_configuration_text_is_parsed_once() {
        let path = Path::new("/nowhere/parse-once/quiver.yaml");
        let parses = || PARSES.with(|n| n.get());
        let before = parses();
        let a = parse(path, "rescan_interval_ms: 7\n", "quiver.yaml").unwrap();
        // Another file parsed in between (another caller, or another test thread) does not
        // make this one parse again.
        let other = parse(Path::new("/nowhere/parse-once/other.yaml"), "rescan_interval_ms: 5\n", "other.yaml");
        assert_eq!(other.unwrap().rescan_interval_ms, 5);
        let b = parse(path, "rescan_interval_ms: 7\n", "quiver.yaml").unwrap();
        assert_eq!((a.rescan_interval_ms, b.rescan_interval_ms), (7, 7));
        assert_eq!(parses() - before, 2);
        let c = parse(path, "rescan_interval_ms: 8\n", "quiver.yaml").unwrap();
        assert_eq!(c.rescan_interval_ms, 8);
        assert_eq!(parses() - before, 3);
        for _ in 0..2 {
            let e = parse(path, "rescan_interval_ms: soon\n", "quiver.yaml").unwrap_err().to_string();
            assert!(e.contains("rescan_interval_ms"), "{e}");
        }
        assert_eq!(parses() - before, 5);
    }

    /// A configuration that passed the schema check is recorded in its existing state folder
    /// (and the next process skips that check for exactly that text); no state folder, no record.
    #[test]
    fn a_configuration_that_passed_the_schema_check_is_recorded_in_its_state_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quiver.yaml");
        let text = "state_dir: state\nrescan_interval_ms: 9\n";
        let record = dir.path().join("state").join(quiver_lifecycle::record::LOG_FILE);
        parse(&path, text, "quiver.yaml").unwrap();
        assert!(!dir.path().join("state").exists(), "no state folder is created for the record");
        std::fs::create_dir(dir.path().join("state")).unwrap();
        let text = "state_dir: state\nrescan_interval_ms: 10\n";
        assert_eq!(parse(&path, text, "quiver.yaml").unwrap().rescan_interval_ms, 10);
        assert_eq!(std::fs::read_to_string(&record).unwrap(), format!("{}\n", schema_check_digest(text)));
        assert_ne!(schema_check_digest(text), schema_check_digest("state_dir: state\nrescan_interval_ms: 11\n"));
        // A recorded text parses to the same configuration; a bad one is still refused by field.
        assert_eq!(parse(&path, text, "quiver.yaml").unwrap().rescan_interval_ms, 10);
        let bad = "state_dir: state\nrescan_interval_ms: -1\n";
        let e = parse(&path, bad, "quiver.yaml").unwrap_err().to_string();
        assert!(e.contains("rescan_interval_ms"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&record).unwrap(),
            format!("{}\n", schema_check_digest(text)),
            "a refused text is not recorded"
        );
    }

    #[test]
    fn user_config_follows_the_xdg_rules() {
        assert_eq!(user_config_path(Some("/x/cfg"), Some("/home/u")), Some(PathBuf::from("/x/cfg/quiver/quiver.yaml")));
        // Unset, empty or relative XDG_CONFIG_HOME falls back to ~/.config.
        for xdg in [None, Some(""), Some("rel/cfg")] {
            assert_eq!(
                user_config_path(xdg, Some("/home/u")),
                Some(PathBuf::from("/home/u/.config/quiver/quiver.yaml")),
                "{xdg:?}"
            );
        }
        assert_eq!(user_config_path(None, None), None);
        assert_eq!(user_config_path(None, Some("relative")), None);
    }
}

#[cfg(test)]
thread_local! {
    /// Parses run by [`parse`] on this thread.
    static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A configuration parsed without error: the file and text it came from, and the record of its
/// schema check still to be written (its state folder did not exist yet).
struct Parsed {
    path: PathBuf,
    text: String,
    config: HostConfig,
    unrecorded: Option<(PathBuf, String)>,
}

/// The last configuration parsed without error from each file. One entry per configuration file:
/// a process reads one (tests read several, from several threads, and one file's parse never
/// evicts another's).
static PARSED: Mutex<Vec<Parsed>> = Mutex::new(Vec::new());

/// Parses the configuration `text` read from `path` (named `origin` in messages). The same
/// text of the same file parsed before in this process gives that result again without a
/// second parse; anything else (another file, changed text) is parsed afresh. Errors are never
/// kept, so a failed parse is reported by the caller that reports errors.
pub fn parse(path: &Path, text: &str, origin: &str) -> Result<HostConfig, ManifestError> {
    let mut parsed = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(kept) = parsed.iter().find(|p| p.path == path && p.text == text) {
        return Ok(kept.config.clone());
    }
    #[cfg(test)]
    PARSES.with(|n| n.set(n.get() + 1));
    let digest = schema_check_digest(text);
    let record = |config: &HostConfig| {
        path.parent().unwrap_or(Path::new("")).join(&config.state_dir).join(quiver_lifecycle::record::LOG_FILE)
    };
    let (config, checked_now) = HostConfig::from_yaml_with(text, origin, |config| {
        quiver_lifecycle::record::log(&record(config)).contains(&digest)
    })?;
    let unrecorded = match checked_now {
        true => keep_schema_check(record(&config), digest),
        false => None,
    };
    let entry = Parsed { path: path.to_owned(), text: text.to_owned(), config: config.clone(), unrecorded };
    match parsed.iter_mut().find(|p| p.path == path) {
        Some(kept) => *kept = entry,
        None => parsed.push(entry),
    }
    Ok(config)
}

/// Writes the record of the schema check of the configuration last parsed from `path` if it
/// could not be written then because its state folder did not exist (a first start: loading the
/// settings makes that folder after the configuration was read).
pub fn keep_unrecorded_check(path: &Path) {
    let mut parsed = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(kept) = parsed.iter_mut().find(|p| p.path == path)
        && let Some((file, digest)) = kept.unrecorded.take()
    {
        kept.unrecorded = keep_schema_check(file, digest);
    }
}

/// The record of a configuration text that passed the schema check in this host build: the
/// sha256 of the build's version and the text. Another text or another build never matches.
fn schema_check_digest(text: &str) -> String {
    quiver_lifecycle::record::digest("quiver configuration schema check", &[text.as_bytes()])
}

/// Keeps the record (best effort: without it the next start checks the schema again), only in
/// a state folder that exists (a command never creates one just for this). Gives the record back
/// when there is no such folder yet.
fn keep_schema_check(file: PathBuf, digest: String) -> Option<(PathBuf, String)> {
    if !file.parent().is_some_and(Path::is_dir) {
        return Some((file, digest));
    }
    let _ = quiver_lifecycle::record::log(&file).add(&digest);
    None
}

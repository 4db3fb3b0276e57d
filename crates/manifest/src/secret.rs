//! Where a secret's value comes from ([`SecretRef`]: an environment variable or a file) and the
//! value itself ([`Secret`], never printed). Used for plugin secrets (`secrets:` in
//! `quiver.yaml`) and for anything else the configuration must not hold in clear text.
//!
//! [`SecretRef::resolve`] is the one place in this crate that does I/O (it reads the environment
//! or one file), and only when a caller asks for it; parsing a configuration never resolves.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Largest secret file read, in bytes: a token or key, not a document.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Where a secret comes from. In YAML: `{ env: GITHUB_TOKEN }` or `{ file: secrets/github }`
/// (relative files are resolved against the configuration file's folder).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SecretRef {
    /// An environment variable of the host process, read when the secret is resolved.
    Env(String),
    /// A file whose contents (one trailing newline removed) are the value, read when resolved.
    File(PathBuf),
}

/// A secret value. Its `Debug` and `Display` print `<redacted>`; read it with
/// [`Secret::expose`] only where it is handed to its consumer.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }
    /// The value itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        // Overwrite the bytes before the allocation is freed (best effort: copies made by the
        // consumer are its own).
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// Why a secret could not be resolved. Messages name the variable or file and say how to fix it;
/// they never contain the value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The environment variable is not set.
    #[error("environment variable `{0}` is not set; export it before starting quiver (or use `file:`)")]
    EnvMissing(String),
    /// The environment variable is set but empty or not UTF-8.
    #[error("environment variable `{0}` is empty or not valid UTF-8; give it the secret's value")]
    EnvInvalid(String),
    /// The file could not be read.
    #[error("secret file {path} cannot be read ({reason}); create it readable by quiver only, or use `env:`")]
    FileUnreadable {
        /// The resolved path.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The file is empty, too large or not UTF-8.
    #[error("secret file {path} is {problem}; it must hold the value as UTF-8 text (at most 64 KiB)")]
    FileInvalid {
        /// The resolved path.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
}

impl SecretRef {
    /// Reads the value: the environment variable, or the file (`base_dir` joined to a relative
    /// path). One trailing `\n` (or `\r\n`) of a file is removed.
    pub fn resolve(&self, base_dir: &Path) -> Result<Secret, SecretError> {
        self.resolve_with(base_dir, |name| std::env::var_os(name))
    }

    /// [`SecretRef::resolve`] with the environment given by `env` (for tests and for callers
    /// that hold a captured environment).
    pub fn resolve_with(
        &self,
        base_dir: &Path,
        env: impl FnOnce(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Secret, SecretError> {
        match self {
            SecretRef::Env(name) => match env(name) {
                None => Err(SecretError::EnvMissing(name.clone())),
                Some(v) => match v.into_string() {
                    Ok(s) if !s.is_empty() => Ok(Secret(s)),
                    _ => Err(SecretError::EnvInvalid(name.clone())),
                },
            },
            SecretRef::File(path) => {
                let path = base_dir.join(path);
                read_secret_file(&path)
            }
        }
    }

    /// Where the value comes from, for messages: `environment variable X` or `file P`.
    pub fn describe(&self) -> String {
        match self {
            SecretRef::Env(name) => format!("environment variable `{name}`"),
            SecretRef::File(path) => format!("file {}", path.display()),
        }
    }
}

fn read_secret_file(path: &Path) -> Result<Secret, SecretError> {
    use std::io::Read;
    let shown = path.display().to_string();
    let unreadable = |e: std::io::Error| SecretError::FileUnreadable { path: shown.clone(), reason: e.to_string() };
    // A FIFO (or a device) is refused before it is opened: opening a FIFO to read waits for a
    // writer, which would hold up start-up and every rescan. (The open file is checked again.)
    if !std::fs::metadata(path).map_err(unreadable)?.is_file() {
        return Err(SecretError::FileInvalid { path: shown, problem: "not a regular file" });
    }
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(SecretError::FileInvalid { path: shown, problem: "not a regular file" });
    }
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(unreadable)?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(SecretError::FileInvalid { path: shown, problem: "larger than 64 KiB" });
    }
    let mut text = String::from_utf8(bytes)
        .map_err(|_| SecretError::FileInvalid { path: shown.clone(), problem: "not valid UTF-8" })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(SecretError::FileInvalid { path: shown, problem: "empty" });
    }
    Ok(Secret(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO (or another special file) as a secret file is refused at once: opening it for
    /// reading used to wait for a writer, and so blocked start-up and every rescan.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("token");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(SecretRef::File(path).resolve(Path::new("/")));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        let Ok(result) = got else {
            // Unblock the reader so the test process can end.
            drop(std::fs::OpenOptions::new().write(true).open(&fifo));
            panic!("reading a FIFO secret file blocked waiting for a writer");
        };
        let err = result.unwrap_err();
        assert_eq!(err, SecretError::FileInvalid { path: fifo.display().to_string(), problem: "not a regular file" });
    }

    #[test]
    fn yaml_shapes_parse() {
        let parse = |text: &str| serde_json::from_value::<SecretRef>(crate::yaml::parse(text).unwrap());
        assert_eq!(parse("env: GITHUB_TOKEN").unwrap(), SecretRef::Env("GITHUB_TOKEN".into()));
        assert_eq!(parse("file: secrets/gh").unwrap(), SecretRef::File("secrets/gh".into()));
        assert!(parse("value: inline").is_err());
    }

    #[test]
    fn env_resolves_and_missing_is_named() {
        let r = SecretRef::Env("QV_TOKEN".into());
        let s = r.resolve_with(Path::new("."), |n| (n == "QV_TOKEN").then(|| "s3cr3t".into())).unwrap();
        assert_eq!(s.expose(), "s3cr3t");
        assert_eq!(format!("{s:?} {s}"), "Secret(<redacted>) <redacted>");
        let err = r.resolve_with(Path::new("."), |_| None).unwrap_err();
        assert!(err.to_string().contains("`QV_TOKEN` is not set"), "{err}");
    }

    #[test]
    fn file_resolves_relative_to_base_and_trims_one_newline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok"), "abc\n").unwrap();
        let s = SecretRef::File("tok".into()).resolve(dir.path()).unwrap();
        assert_eq!(s.expose(), "abc");
        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        let err = SecretRef::File("empty".into()).resolve(dir.path()).unwrap_err();
        assert!(err.to_string().contains("is empty"), "{err}");
        let err = SecretRef::File("absent".into()).resolve(dir.path()).unwrap_err();
        assert!(err.to_string().contains("absent") && err.to_string().contains("cannot be read"), "{err}");
    }

    #[test]
    fn config_secrets_section_parses_and_rejects_inline_values() {
        let cfg = crate::HostConfig::from_yaml(
            "secrets:\n  gh-tools:\n    GITHUB_TOKEN: { env: GH_TOKEN }\n    DEPLOY_KEY: { file: keys/deploy }\n",
            "quiver.yaml",
        )
        .unwrap();
        let gh = &cfg.secrets["gh-tools"];
        assert_eq!(gh["GITHUB_TOKEN"], SecretRef::Env("GH_TOKEN".into()));
        assert_eq!(gh["DEPLOY_KEY"], SecretRef::File("keys/deploy".into()));
        let err = crate::HostConfig::from_yaml("secrets:\n  gh-tools:\n    T: { value: abc }\n", "quiver.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("secrets"), "{err}");
    }
}

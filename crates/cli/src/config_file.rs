//! Where the host configuration comes from. In order: `--config FILE` (or `QUIVER_CONFIG`),
//! `./quiver.yaml`, `$XDG_CONFIG_HOME/quiver/quiver.yaml` (`~/.config/quiver/quiver.yaml` when
//! `XDG_CONFIG_HOME` is unset or not absolute, as the XDG base-directory specification says),
//! else the built-in defaults. Only finds the file: reading and resolving it is
//! [`crate::settings`]'s job.

use std::path::{Path, PathBuf};

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
            bail!(
                "configuration file {} does not exist; pass an existing file to --config (or QUIVER_CONFIG), or leave \
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

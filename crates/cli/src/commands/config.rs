//! `quiver config`: which configuration file is in effect (and why), and every setting it
//! resolves to (the defaults filled in). Answers "why does quiver not see my plugins?" without reading the lookup rules.

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::GlobalArgs;
use crate::config_file::{self, Origin};
use crate::settings::Settings;

/// Arguments of `quiver config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {}

pub fn run(g: &GlobalArgs, _a: &ConfigArgs) -> Result<()> {
    let cwd = std::env::current_dir()?;
    let found = config_file::locate(g.config.as_deref(), &cwd)?;
    let settings = Settings::load(g)?;
    let user = config_file::user_config_path(
        std::env::var("XDG_CONFIG_HOME").ok().as_deref(),
        std::env::var("HOME").ok().as_deref(),
    );
    let (file, origin) = match &found {
        Some((path, origin)) => (Some(cwd.join(path)), Some(*origin)),
        None => (None, None),
    };
    if g.json {
        let v = json!({
            "config_file": file.as_ref().map(|p| p.display().to_string()),
            "origin": origin.map(Origin::describe),
            "user_config_file": user.as_ref().map(|p| p.display().to_string()),
            "plugins_dir": settings.host.plugins_dir.display().to_string(),
            "base_dir": settings.base_dir.display().to_string(),
            // Every setting, the defaults filled in (paths as written; they resolve against
            // `base_dir`).
            "settings": &settings.config,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    match (&file, origin) {
        (Some(f), Some(o)) => println!("config file:  {} (from {})", f.display(), o.describe()),
        _ => println!("config file:  none (built-in defaults)"),
    }
    println!("plugins dir:  {}", settings.host.plugins_dir.display());
    println!(
        "looked in:    --config / QUIVER_CONFIG, ./{}, {}",
        config_file::CONFIG_FILE,
        user.map(|p| p.display().to_string()).unwrap_or_else(|| "(no XDG_CONFIG_HOME or HOME)".to_owned())
    );
    // Every setting, the defaults filled in: paths as written (relative ones resolve against
    // the configuration's folder).
    println!("settings (defaults filled in; relative paths resolve against {}):", settings.base_dir.display());
    for line in serde_yaml::to_string(&settings.config)?.lines() {
        println!("  {line}");
    }
    Ok(())
}

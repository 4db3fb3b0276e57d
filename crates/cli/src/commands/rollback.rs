//! `quiver rollback`: roll a plugin back to a lower version on purpose. Drops the plugin's entry
//! from the persistent rollback record (highest accepted version), so the next scan accepts the
//! lower signed version now in the plugins folder; logged with the reason in
//! `STATE_DIR/rollback.log`.

use anyhow::Result;
use clap::Args;

use crate::GlobalArgs;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The plugin id (as in its manifest's `id`).
    pub plugin: String,
    /// Why (kept in the rollback log).
    #[arg(long)]
    pub reason: String,
}

pub fn run(g: &GlobalArgs, a: &RollbackArgs) -> Result<()> {
    if a.reason.trim().is_empty() {
        return Err(crate::UsageError("--reason must say why the plugin is rolled back".to_owned()).into());
    }
    let mut settings = Settings::load(g)?;
    let store = settings.raise_rollback()?;
    let forgotten = store.allow_rollback(&a.plugin, &a.reason).map_err(anyhow::Error::msg)?;
    let log = store.dir().join(quiver_lifecycle::ROLLBACK_LOG);
    match forgotten {
        Some(rec) => println!(
            "rollback allowed for {}: the record of version {} (sha256 {}) is dropped; the next scan accepts a lower signed version (logged in {})",
            a.plugin,
            rec.version,
            rec.sha256,
            log.display()
        ),
        None => println!("{} had no rollback record; nothing to drop (logged in {})", a.plugin, log.display()),
    }
    Ok(())
}

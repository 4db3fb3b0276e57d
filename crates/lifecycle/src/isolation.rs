//! Which bundles run where: the operator's isolation choices resolved for the loader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use quiver_manifest::Isolation;

use crate::worker::WorkerSettings;

/// Where each bundle runs, and how workers start. Resolution order for a bundle: its plugin id,
/// then its signing key, then `default`, then trust (`first_party` keys in-process, the rest
/// in a worker).
#[derive(Debug, Clone)]
pub struct IsolationPolicy {
    /// For bundles nothing else names; `None`: follow trust.
    pub default: Option<Isolation>,
    /// By plugin id.
    pub plugins: BTreeMap<String, Isolation>,
    /// By signing key id.
    pub keys: BTreeMap<String, Isolation>,
    /// Key ids marked `first_party`.
    pub first_party: BTreeSet<String>,
    /// How workers start; `None` when this host has no worker program (then a bundle that must
    /// run in a worker is refused with a clear message).
    pub worker: Option<WorkerSettings>,
    /// The operator's `plugin_config`, to resolve sandbox paths declared by configuration key.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
    /// The host's working folder (sandbox paths relative to it, `default: working_dir`).
    pub working_dir: PathBuf,
    /// Where worker plugins' load reports (the `PluginInfo` a worker sent for a library
    /// sha256) are kept so a later start can list the plugin's tools at once, before its worker
    /// is up; `None`: every scan waits for its workers (`quiver serve` sets it).
    pub start_cache: Option<PathBuf>,
}

impl Default for IsolationPolicy {
    /// Everything in-process (embedding and tests); the `quiver` binary builds its policy from
    /// `quiver.yaml`, where the default follows trust.
    fn default() -> IsolationPolicy {
        IsolationPolicy {
            default: Some(Isolation::InProcess),
            plugins: BTreeMap::new(),
            keys: BTreeMap::new(),
            first_party: BTreeSet::new(),
            worker: None,
            plugin_config: BTreeMap::new(),
            working_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            start_cache: None,
        }
    }
}

impl IsolationPolicy {
    /// Where the bundle of plugin `id`, signed by `signer` (key id; `None`: unsigned), runs.
    pub fn choose(&self, id: &str, signer: Option<&str>) -> Isolation {
        if let Some(i) = self.plugins.get(id) {
            return *i;
        }
        if let Some(i) = signer.and_then(|k| self.keys.get(k)) {
            return *i;
        }
        if let Some(i) = self.default {
            return i;
        }
        match signer {
            Some(k) if self.first_party.contains(k) => Isolation::InProcess,
            _ => Isolation::Process,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_beats_key_beats_default_beats_trust() {
        let mut p = IsolationPolicy { default: None, ..IsolationPolicy::default() };
        p.first_party.insert("K1".into());
        assert_eq!(p.choose("a", Some("K1")), Isolation::InProcess, "first-party key: fast path");
        assert_eq!(p.choose("a", Some("K2")), Isolation::Process, "other keys: worker");
        assert_eq!(p.choose("a", None), Isolation::Process, "unsigned: worker");
        p.keys.insert("K1".into(), Isolation::Process);
        assert_eq!(p.choose("a", Some("K1")), Isolation::Process);
        p.plugins.insert("a".into(), Isolation::InProcess);
        assert_eq!(p.choose("a", Some("K1")), Isolation::InProcess);
        p.default = Some(Isolation::InProcess);
        assert_eq!(p.choose("b", Some("K2")), Isolation::InProcess);
    }
}

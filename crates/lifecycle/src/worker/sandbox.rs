//! The worker's sandbox: entered by the worker process itself before it loads any plugin code.
//!
//! On Linux the plugin may open only the system library folders (read) and the paths its
//! manifest declares; TCP `bind`/`connect` are refused unless it declares `network: true`; it
//! cannot connect to abstract UNIX sockets or signal processes outside its sandbox (Landlock).
//! Where the kernel has no Landlock, [`enter`] says so in its report; it never fails open
//! silently. Resource limits (`setrlimit`) are set by the host before the worker runs at all.

use super::protocol::SandboxRules;

/// Folders the dynamic loader may need to read to resolve a plugin's own library dependencies.
#[cfg(target_os = "linux")]
const SYSTEM_LIBRARY_DIRS: &[&str] = &["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache"];

/// Device files any program may use.
#[cfg(target_os = "linux")]
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/urandom"];

/// Restricts this process (all threads created from now on) to `rules`. Call it before any
/// other thread exists and before plugin code is loaded. Returns what is enforced, for
/// operators, in one line (`landlock: files limited to 1 declared path(s), network denied`, or
/// `NOT SANDBOXED: ...` and why).
#[cfg(target_os = "linux")]
pub(crate) fn enter(rules: &SandboxRules) -> String {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, Scope,
    };
    // The features this code was tested with; older kernels enforce what they can (best effort)
    // and the report says how much.
    let abi = ABI::V6;
    let build = || -> Result<RulesetStatus, landlock::RulesetError> {
        let mut ruleset =
            Ruleset::default().set_compatibility(CompatLevel::BestEffort).handle_access(AccessFs::from_all(abi))?;
        if !rules.network {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        let ruleset = ruleset.scope(Scope::from_all(abi))?;
        let mut created = ruleset.create()?;
        for dir in SYSTEM_LIBRARY_DIRS {
            if let Ok(fd) = PathFd::new(dir) {
                created = created.add_rule(PathBeneath::new(fd, AccessFs::from_read(abi)))?;
            }
        }
        for dev in DEVICES {
            if let Ok(fd) = PathFd::new(dev) {
                created = created.add_rule(PathBeneath::new(fd, AccessFs::ReadFile | AccessFs::WriteFile))?;
            }
        }
        for p in &rules.paths {
            match PathFd::new(&p.path) {
                Ok(fd) => {
                    let mut access = if p.write { AccessFs::from_all(abi) } else { AccessFs::from_read(abi) };
                    // A single file (an adapter's program, /etc/hosts) takes file rights only.
                    if !std::path::Path::new(&p.path).is_dir() {
                        access &= AccessFs::from_file(abi);
                    }
                    created = created.add_rule(PathBeneath::new(fd, access))?;
                }
                Err(e) => eprintln!("quiver worker: declared path {} cannot be opened ({e}); it stays closed", p.path),
            }
        }
        Ok(created.restrict_self()?.ruleset)
    };
    let network = if rules.network { "network allowed (declared)" } else { "network denied" };
    match build() {
        Ok(RulesetStatus::FullyEnforced) => {
            format!("landlock: files limited to {} declared path(s), {network}", rules.paths.len())
        }
        Ok(RulesetStatus::PartiallyEnforced) => format!(
            "landlock (partial: this kernel lacks some features): files limited to {} declared path(s), {}",
            rules.paths.len(),
            if rules.network { "network allowed (declared)" } else { "network denied where the kernel supports it" }
        ),
        Ok(RulesetStatus::NotEnforced) => {
            "NOT SANDBOXED: this kernel has no Landlock (process isolation and resource limits only)".to_owned()
        }
        Err(e) => format!("NOT SANDBOXED: Landlock setup failed: {e}"),
    }
}

/// Other systems: no sandbox, said plainly.
#[cfg(not(target_os = "linux"))]
pub(crate) fn enter(_rules: &SandboxRules) -> String {
    "NOT SANDBOXED: file and network restrictions need Linux Landlock".to_owned()
}

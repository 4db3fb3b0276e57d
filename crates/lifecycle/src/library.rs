//! Turning verified library bytes into a callable plugin module: a sealed in-memory file (or a
//! private copy where memory files are unavailable), `dlopen`, the ABI check and the plugin's
//! self-description. Shared by in-process loading and by worker processes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use quiver_abi::{ABI_VERSION, PluginInfo, PluginModRef};
use quiver_manifest::Manifest;

use crate::bundle::Stage;

/// Puts `bytes` where the dynamic loader can open them and nothing can change them, and returns
/// that path: a sealed memory file on Linux (kept open for the life of the process: libraries are
/// never unloaded, so its `/proc/self/fd/N` name is never reused), else a new private file
/// (0500 in a 0700 folder) in `cache_dir`. The dynamic loader must never be handed a name it has
/// seen before for other bytes (it would return the old library).
pub(crate) fn stage_library(bytes: &[u8], name: &str, cache_dir: Option<&Path>) -> std::io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    match sealed_memfd(bytes, name) {
        Ok(p) => return Ok(p),
        Err(e) if cache_dir.is_none() => return Err(e),
        Err(e) => tracing::debug!(error = %e, "no sealed memory file; writing a private copy"),
    }
    match cache_dir {
        Some(dir) => write_private_copy(bytes, name, dir),
        None => Err(std::io::Error::other("no folder for private library copies")),
    }
}

#[cfg(target_os = "linux")]
fn sealed_memfd(bytes: &[u8], name: &str) -> std::io::Result<PathBuf> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let cname = std::ffi::CString::new(format!("quiver:{name}")).map_err(std::io::Error::other)?;
    // MFD_EXEC (kernels with vm.memfd_noexec) says the file is meant to be mapped executable;
    // older kernels reject the flag, so retry without it.
    const MFD_EXEC: libc::c_uint = 0x0010;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `cname` is a valid NUL-terminated string; the flags are valid.
    let mut fd = unsafe { libc::memfd_create(cname.as_ptr(), flags | MFD_EXEC) };
    if fd < 0 {
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
    }
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { fs::File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on an fd we own.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Kept open on purpose (see `LoadPath::Memory`).
    let fd = file.into_raw_fd();
    Ok(PathBuf::from(format!("/proc/self/fd/{fd}")))
}

static COPY_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes the bytes to a new, unique, private path in `cache_dir` (never reused, never
/// overwritten).
fn write_private_copy(bytes: &[u8], name: &str, cache_dir: &Path) -> std::io::Result<PathBuf> {
    fs::create_dir_all(cache_dir)?;
    fs::set_permissions(cache_dir, fs::Permissions::from_mode(0o700))?;
    let cache_dir = fs::canonicalize(cache_dir)?;
    loop {
        let n = COPY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = cache_dir.join(format!("{name}-{}-{n}{}", std::process::id(), std::env::consts::DLL_SUFFIX));
        let mut f = match fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        f.write_all(bytes)?;
        drop(f);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o500))?;
        return Ok(path);
    }
}

/// A plugin library opened in this process.
pub(crate) struct OpenedPlugin {
    pub(crate) module: PluginModRef,
    /// The plugin's `PluginInfo` JSON as it reported it.
    pub(crate) info_text: String,
}

/// Opens a staged library: `dlopen` (plugin constructors run here), root module, ABI version,
/// plugin info.
pub(crate) fn open_plugin(path: &Path) -> Result<OpenedPlugin, (Stage, String)> {
    let header = abi_stable::library::lib_header_from_path(path)
        .map_err(|e| (Stage::Abi, format!("cannot open the library as a Quiver plugin: {e}")))?;
    let module = header.init_root_module::<PluginModRef>().map_err(|e| {
        (
            Stage::Abi,
            format!(
                "the library's ABI does not match this host (rebuild the plugin against quiver-abi {}): {e}",
                quiver_abi::SDK_VERSION
            ),
        )
    })?;
    let abi = (module.abi_version())();
    if abi != ABI_VERSION {
        return Err((Stage::Abi, format!("the plugin reports ABI v{abi}, this host speaks v{ABI_VERSION}")));
    }
    let info_text = (module.plugin_info())().into_string();
    Ok(OpenedPlugin { module, info_text })
}

/// Reads a plugin's self-description (`PluginInfo` JSON).
pub(crate) fn parse_info(info_text: &str) -> Result<PluginInfo, (Stage, String)> {
    serde_json::from_str(info_text).map_err(|e| {
        (Stage::Embedded, format!("the library's plugin info is unreadable: {e}: {}", truncate(info_text, 200)))
    })
}

/// Checks a plugin's self-description against its signed manifest: ABI generation, and the
/// embedded manifest agrees with the signed one.
pub(crate) fn check_embedded(manifest: &Manifest, info: &PluginInfo) -> Result<(), (Stage, String)> {
    if manifest.abi != ABI_VERSION {
        return Err((Stage::Abi, format!("the manifest says ABI v{}, this host speaks v{ABI_VERSION}", manifest.abi)));
    }
    if info.abi_version != ABI_VERSION {
        return Err((
            Stage::Abi,
            format!("the plugin was built for ABI v{}, this host speaks v{ABI_VERSION}", info.abi_version),
        ));
    }
    let embedded = Manifest::from_yaml(&info.manifest, &format!("embedded manifest of {}", manifest.id))
        .map_err(|e| (Stage::Embedded, e.to_string()))?;
    manifest.agrees_with_embedded(&embedded).map_err(|e| {
        (
            Stage::Embedded,
            format!("the signed manifest does not match the manifest built into the library ({e}); rebuild the bundle from the same tool.yaml"),
        )
    })
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

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

/// Library bytes that matched their checksum, exactly as hashed: in a sealed memory file (Linux;
/// written while it was hashed, so no copy of the library sits on the heap), else in memory.
pub struct VerifiedLibrary(Held);

enum Held {
    #[cfg(target_os = "linux")]
    Sealed {
        file: fs::File,
        len: u64,
    },
    Bytes(Vec<u8>),
}

impl std::fmt::Debug for VerifiedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedLibrary").field("len", &self.len()).finish_non_exhaustive()
    }
}

impl VerifiedLibrary {
    /// Bytes already in memory (an adapter bundle's manifest).
    pub fn from_bytes(bytes: Vec<u8>) -> VerifiedLibrary {
        VerifiedLibrary(Held::Bytes(bytes))
    }

    /// Their length.
    pub fn len(&self) -> u64 {
        match &self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { len, .. } => *len,
            Held::Bytes(b) => b.len() as u64,
        }
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the bytes (what a worker process is sent).
    pub fn to_vec(&self) -> std::io::Result<Vec<u8>> {
        match &self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { file, len } => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0; *len as usize];
                file.read_exact_at(&mut buf, 0)?;
                Ok(buf)
            }
            Held::Bytes(b) => Ok(b.clone()),
        }
    }

    /// Another handle on the same bytes (the sealed memory file is shared, not copied).
    pub fn try_clone(&self) -> std::io::Result<VerifiedLibrary> {
        Ok(VerifiedLibrary(match &self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { file, len } => Held::Sealed { file: file.try_clone()?, len: *len },
            Held::Bytes(b) => Held::Bytes(b.clone()),
        }))
    }

    /// Writes the bytes to `out`, from the sealed memory file in 64 KiB pieces (no copy of the
    /// whole library in memory: how a worker process is sent them).
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match &self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { file, len } => {
                use std::os::unix::fs::FileExt;
                let mut chunk = vec![0u8; 64 << 10];
                let mut at = 0u64;
                while at < *len {
                    let want = chunk.len().min((*len - at) as usize);
                    file.read_exact_at(&mut chunk[..want], at)?;
                    out.write_all(&chunk[..want])?;
                    at += want as u64;
                }
                Ok(())
            }
            Held::Bytes(b) => out.write_all(b),
        }
    }

    /// True when the bytes are in a sealed memory file (staging them needs no folder).
    pub(crate) fn is_sealed(&self) -> bool {
        match &self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { .. } => true,
            Held::Bytes(_) => false,
        }
    }

    /// Where the dynamic loader can open these bytes and nothing can change them (see
    /// [`stage_library`]): the sealed memory file itself (kept open for the life of the
    /// process), or a new staged copy.
    pub(crate) fn stage(self, name: &str, cache_dir: Option<&Path>) -> std::io::Result<PathBuf> {
        match self.0 {
            #[cfg(target_os = "linux")]
            Held::Sealed { file, .. } => {
                use std::os::fd::IntoRawFd;
                // Kept open on purpose: its `/proc/self/fd/N` name is never reused.
                Ok(PathBuf::from(format!("/proc/self/fd/{}", file.into_raw_fd())))
            }
            Held::Bytes(b) => stage_library(&b, name, cache_dir),
        }
    }
}

/// Reads an opened library file of `len` bytes (at most `cap`) while hashing it: into a sealed
/// memory file named `name` on Linux (no heap copy), else into memory. Returns the bytes and
/// their sha256; the caller compares it with the signed one before using the bytes.
pub(crate) fn read_hashed(
    mut file: fs::File,
    len: u64,
    cap: u64,
    name: &str,
) -> std::io::Result<(VerifiedLibrary, String)> {
    use std::io::Read;
    let mut hash = quiver_manifest::Sha256Stream::default();
    #[cfg(target_os = "linux")]
    if let Ok(mut memfd) = new_memfd(name) {
        // 64 KiB: under the allocator's mmap threshold, so the buffer comes from (and goes back
        // to) the heap instead of being mapped, zeroed page by page and unmapped per library.
        let mut chunk = vec![0u8; 64 << 10];
        let mut total = 0u64;
        loop {
            let n = match file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            total += n as u64;
            if total > cap {
                return Err(std::io::Error::other(format!("the file is larger than the {cap}-byte limit")));
            }
            hash.update(&chunk[..n]);
            memfd.write_all(&chunk[..n])?;
        }
        seal(&memfd)?;
        return Ok((VerifiedLibrary(Held::Sealed { file: memfd, len: total }), hash.finish_hex()));
    }
    let mut buf = Vec::with_capacity(len.min(cap) as usize);
    file.take(cap + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(std::io::Error::other(format!("the file is larger than the {cap}-byte limit")));
    }
    hash.update(&buf);
    Ok((VerifiedLibrary(Held::Bytes(buf)), hash.finish_hex()))
}

/// A new memory file that may be sealed and mapped executable.
#[cfg(target_os = "linux")]
fn new_memfd(name: &str) -> std::io::Result<fs::File> {
    use std::os::fd::FromRawFd;
    let cname = std::ffi::CString::new(format!("quiver:{name}")).map_err(std::io::Error::other)?;
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
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// Seals a memory file: its bytes can no longer change.
///
/// The kernel refuses `F_SEAL_WRITE` with `EBUSY` while something still holds a reference to one
/// of the file's pages (it waits about 150 ms for such references to go first); on a loaded
/// machine that happens now and then right after the pages were written. The seal is then tried
/// again a few times before the error is given, naming the step.
#[cfg(target_os = "linux")]
fn seal(file: &fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    retry_busy(SEAL_TRIES, std::time::Duration::from_millis(20), || {
        // SAFETY: fcntl on an fd we own.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
    .map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot seal its in-memory copy ({e}; tried {SEAL_TRIES} times)"))
    })
}

/// How many times a seal refused with `EBUSY` is tried in all.
#[cfg(target_os = "linux")]
const SEAL_TRIES: u32 = 6;

/// Runs `op` up to `tries` times while it fails with `EBUSY`, waiting `pause`, then twice as
/// long each time; any other outcome is returned at once.
#[cfg(target_os = "linux")]
fn retry_busy(
    tries: u32,
    pause: std::time::Duration,
    mut op: impl FnMut() -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut wait = pause;
    let mut left = tries.max(1);
    loop {
        match op() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && left > 1 => {
                left -= 1;
                std::thread::sleep(wait);
                wait *= 2;
            }
            other => return other,
        }
    }
}

#[cfg(target_os = "linux")]
fn sealed_memfd(bytes: &[u8], name: &str) -> std::io::Result<PathBuf> {
    use std::os::fd::IntoRawFd;
    let mut file = new_memfd(name)?;
    file.write_all(bytes)?;
    seal(&file)?;
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

/// Checks a plugin's self-description against its signed manifest (whose bytes hash to
/// `manifest_sha256`): ABI generation, and the embedded manifest agrees with the signed one.
/// When the signed bytes are the embedded text with the `artifact` section appended as signing
/// appends it (what `quiver sign` and `cargo xtask build-plugins` make), they agree without the
/// embedded text being parsed ([`quiver_manifest::signed_as_pinned`]); else both are compared
/// field by field.
pub(crate) fn check_embedded(
    manifest: &Manifest,
    manifest_sha256: &str,
    info: &PluginInfo,
) -> Result<(), (Stage, String)> {
    if manifest.abi != ABI_VERSION {
        return Err((Stage::Abi, format!("the manifest says ABI v{}, this host speaks v{ABI_VERSION}", manifest.abi)));
    }
    if info.abi_version != ABI_VERSION {
        return Err((
            Stage::Abi,
            format!("the plugin was built for ABI v{}, this host speaks v{ABI_VERSION}", info.abi_version),
        ));
    }
    if manifest.artifact.as_ref().is_some_and(|a| quiver_manifest::signed_as_pinned(&info.manifest, a, manifest_sha256))
    {
        return Ok(());
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

#[cfg(all(test, target_os = "linux"))]
mod seal_tests {
    use super::*;
    use std::time::Duration;

    fn busy() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::EBUSY)
    }

    #[test]
    fn a_seal_refused_as_busy_is_tried_again_until_it_holds() {
        let mut calls = 0;
        let out = retry_busy(6, Duration::ZERO, || {
            calls += 1;
            if calls < 3 { Err(busy()) } else { Ok(()) }
        });
        assert!(out.is_ok(), "{out:?}");
        assert_eq!(calls, 3);
    }

    #[test]
    fn busy_past_the_tries_and_other_errors_are_given_back() {
        let mut calls = 0;
        let out = retry_busy(4, Duration::ZERO, || {
            calls += 1;
            Err(busy())
        });
        assert_eq!(out.unwrap_err().raw_os_error(), Some(libc::EBUSY));
        assert_eq!(calls, 4);
        let mut calls = 0;
        let out = retry_busy(4, Duration::ZERO, || {
            calls += 1;
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        });
        assert_eq!(out.unwrap_err().raw_os_error(), Some(libc::EPERM));
        assert_eq!(calls, 1, "only EBUSY is tried again");
    }

    #[test]
    fn a_written_memory_file_seals_and_refuses_writes() {
        let mut file = new_memfd("seal-test").expect("memfd");
        file.write_all(b"library bytes").expect("write");
        seal(&file).expect("seal");
        assert!(file.write_all(b"more").is_err(), "a sealed file takes no more bytes");
    }
}

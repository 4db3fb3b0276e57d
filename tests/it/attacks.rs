//! The attack suite (issue 10): hostile and tampered bundles built from the real marker plugin,
//! each scanned by a fresh host inside a child process whose environment makes the marker
//! plugin's library constructor write a line to a marker file. No case may add a plugin or write
//! a marker line; each must be refused at the expected check (or, for objects that are not
//! manifest files, never be picked up), and no scan may block.
//!
//! The marker library is built once (two variants: 0.1.0, and 0.2.0 for downgrades and swaps).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quiver_lifecycle::{Host, HostSettings, RollbackStore, Stage, VerifyPolicy};
use quiver_manifest::{PublicKey, TrustedKeys, bundle_comment, sha256_hex, sign};
use quiver_tests::{Bundle, TestKey, plugin_library, write_bundle};

const PLUGIN: &str = "marker-plugin";
const V2: &[(&str, &str)] = &[("QUIVER_MARKER_VERSION", "0.2.0")];
const CHILD_ENV: &str = "QUIVER_ATTACK_CHILD";

/// What a case must end in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Refused at this check.
    Refused(Stage),
    /// Not a manifest file at all (a FIFO or symlink named `*.tool.yaml`): never picked up.
    Ignored,
}

struct Ctx {
    key: TestKey,
    stranger: TestKey,
    v1: PathBuf,
    v2: PathBuf,
}

impl Ctx {
    fn good(&self, dir: &Path) -> Bundle {
        write_bundle(dir, PLUGIN, &self.v1, None, Some(&self.key))
    }

    /// Writes `text` as the manifest and signs it with `key` and `comment` (no validation, so
    /// hostile manifests can be signed by a trusted key: the checks after the signature must
    /// hold on their own).
    fn sign_raw(&self, b: &Bundle, text: &str, key: &TestKey, comment: &str) {
        std::fs::write(&b.manifest, text).unwrap();
        std::fs::write(&b.signature, sign(&key.pair, text.as_bytes(), comment)).unwrap();
    }

    /// Replaces the manifest by `text`, signed by the trusted key with a correct comment for the
    /// marker plugin 0.1.0 and the v1 library.
    fn resign(&self, b: &Bundle, text: &str) {
        let sha = sha256_hex(&std::fs::read(&self.v1).unwrap());
        self.sign_raw(b, text, &self.key, &bundle_comment(PLUGIN, "0.1.0", &sha));
    }

    fn manifest_text(&self, b: &Bundle) -> String {
        std::fs::read_to_string(&b.manifest).unwrap()
    }
}

type Build = Box<dyn Fn(&Path, &Ctx, &mut VerifyPolicy)>;

fn case(
    name: &str,
    expect: Expect,
    build: impl Fn(&Path, &Ctx, &mut VerifyPolicy) + 'static,
) -> (String, Expect, Build) {
    (name.to_owned(), expect, Box::new(build))
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(0o644)).expect("mkfifo");
}

fn replace_with_symlink(path: &Path, target: &Path) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink(target, path).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn trusted(ctx: &Ctx) -> TrustedKeys {
    let mut t = TrustedKeys::default();
    t.add("test", "test", PublicKey::parse(&ctx.key.public_text()).unwrap());
    t
}

/// Every case. Names are unique; each builds its bundle in an empty folder.
fn cases() -> Vec<(String, Expect, Build)> {
    use Expect::{Ignored, Refused};
    let mut v = Vec::new();

    // Library bytes flipped after signing, at several places (ELF header, sections, end).
    for at in [0usize, 1, 4, 16, 64, 4096, 1 << 16, 1 << 18] {
        v.push(case(&format!("library byte {at} flipped"), Refused(Stage::Checksum), move |d, c, _| {
            let b = c.good(d);
            let mut bytes = std::fs::read(&b.library).unwrap();
            let at = at.min(bytes.len() - 1);
            bytes[at] ^= 0x01;
            std::fs::write(&b.library, bytes).unwrap();
        }));
    }
    v.push(case("library last byte flipped", Refused(Stage::Checksum), |d, c, _| {
        let b = c.good(d);
        let mut bytes = std::fs::read(&b.library).unwrap();
        *bytes.last_mut().unwrap() ^= 0x80;
        std::fs::write(&b.library, bytes).unwrap();
    }));
    v.push(case("library truncated", Refused(Stage::Checksum), |d, c, _| {
        let b = c.good(d);
        let bytes = std::fs::read(&b.library).unwrap();
        std::fs::write(&b.library, &bytes[..bytes.len() / 2]).unwrap();
    }));
    v.push(case("library extended", Refused(Stage::Checksum), |d, c, _| {
        let b = c.good(d);
        let mut bytes = std::fs::read(&b.library).unwrap();
        bytes.extend_from_slice(b"\0evil");
        std::fs::write(&b.library, bytes).unwrap();
    }));
    v.push(case("library swapped for another build", Refused(Stage::Checksum), |d, c, _| {
        let b = c.good(d);
        std::fs::copy(&c.v2, &b.library).unwrap();
    }));
    v.push(case("library empty", Refused(Stage::Checksum), |d, c, _| {
        let b = c.good(d);
        std::fs::write(&b.library, b"").unwrap();
    }));

    // Manifest bytes flipped after signing.
    for frac in [0usize, 1, 2, 3, 4, 5, 6, 7] {
        v.push(case(&format!("manifest byte at {frac}/8 flipped"), Refused(Stage::Signature), move |d, c, _| {
            let b = c.good(d);
            let mut bytes = std::fs::read(&b.manifest).unwrap();
            let at = bytes.len() * frac / 8;
            bytes[at] ^= 0x20;
            std::fs::write(&b.manifest, bytes).unwrap();
        }));
    }
    // Manifest edits after signing.
    for (label, from, to) in [
        ("version raised", "version: 0.1.0", "version: 9.9.9"),
        ("id changed", "id: marker-plugin", "id: marker-evil"),
        ("side effects lowered", "side_effects: read", "side_effects: none"),
        ("description edited", "Echo (marker test)", "Echo (edited)"),
        ("artifact file changed", "file: libmarker_plugin.so", "file: libother.so"),
        ("abi changed", "abi: 1", "abi: 2"),
    ] {
        v.push(case(&format!("manifest edited: {label}"), Refused(Stage::Signature), move |d, c, _| {
            let b = c.good(d);
            let text = c.manifest_text(&b);
            assert!(text.contains(from), "{label}: `{from}` in the manifest");
            std::fs::write(&b.manifest, text.replacen(from, to, 1)).unwrap();
        }));
    }
    v.push(case("manifest: artifact sha256 replaced by the evil library's", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let good = sha256_hex(&std::fs::read(&c.v1).unwrap());
        let evil = sha256_hex(&std::fs::read(&c.v2).unwrap());
        std::fs::write(&b.manifest, c.manifest_text(&b).replace(&good, &evil)).unwrap();
        std::fs::copy(&c.v2, &b.library).unwrap();
    }));
    v.push(case("manifest: trailing line appended", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        std::fs::write(&b.manifest, c.manifest_text(&b) + "# harmless?\n").unwrap();
    }));

    // Signatures: missing, wrong, garbage, legacy, misbound.
    v.push(case("signature missing", Refused(Stage::Signature), |d, c, _| {
        std::fs::remove_file(c.good(d).signature).unwrap();
    }));
    v.push(case("signature empty", Refused(Stage::Signature), |d, c, _| {
        std::fs::write(c.good(d).signature, "").unwrap();
    }));
    v.push(case("signature garbage text", Refused(Stage::Signature), |d, c, _| {
        std::fs::write(c.good(d).signature, "untrusted comment: x\nnot base64 at all\n").unwrap();
    }));
    v.push(case("signature binary garbage", Refused(Stage::Signature), |d, c, _| {
        std::fs::write(c.good(d).signature, [0xffu8, 0xfe, 0, 1, 2, 3]).unwrap();
    }));
    v.push(case("signature truncated", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let s = std::fs::read_to_string(&b.signature).unwrap();
        std::fs::write(&b.signature, &s[..s.len() / 2]).unwrap();
    }));
    v.push(case("signature by an untrusted key", Refused(Stage::Signature), |d, c, _| {
        write_bundle(d, PLUGIN, &c.v1, None, Some(&c.stranger));
    }));
    v.push(case("signature over other data", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        std::fs::write(&b.signature, sign(&c.key.pair, b"other data", "quiver-bundle")).unwrap();
    }));
    v.push(case("signature: trusted comment edited", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let s = std::fs::read_to_string(&b.signature).unwrap().replace("version=0.1.0", "version=0.1.1");
        std::fs::write(&b.signature, s).unwrap();
    }));
    v.push(case("signature: legacy free-text comment", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        c.sign_raw(&b, &c.manifest_text(&b), &c.key, "marker-plugin 0.1.0");
    }));
    v.push(case("signature: comment names another plugin", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let sha = sha256_hex(&std::fs::read(&c.v1).unwrap());
        c.sign_raw(&b, &c.manifest_text(&b), &c.key, &bundle_comment("fs-tools", "0.1.0", &sha));
    }));
    v.push(case("signature: comment names another version", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let sha = sha256_hex(&std::fs::read(&c.v1).unwrap());
        c.sign_raw(&b, &c.manifest_text(&b), &c.key, &bundle_comment(PLUGIN, "0.2.0", &sha));
    }));
    v.push(case("signature: comment names another library", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        let sha = sha256_hex(&std::fs::read(&c.v2).unwrap());
        c.sign_raw(&b, &c.manifest_text(&b), &c.key, &bundle_comment(PLUGIN, "0.1.0", &sha));
    }));
    v.push(case("signature: comment lacks the sha256", Refused(Stage::Signature), |d, c, _| {
        let b = c.good(d);
        c.sign_raw(&b, &c.manifest_text(&b), &c.key, "quiver-bundle id=marker-plugin version=0.1.0");
    }));
    v.push(case("signature: key may not sign this plugin id", Refused(Stage::Signature), |d, c, p| {
        c.good(d);
        let mut t = TrustedKeys::default();
        t.add_for("acme", "test", PublicKey::parse(&c.key.public_text()).unwrap(), vec!["acme-*".into()]);
        p.trusted = t;
    }));
    v.push(case("signature: signing key revoked", Refused(Stage::Revoked), |d, c, p| {
        c.good(d);
        p.revoked.keys.push(c.key.pair.key_id());
    }));
    v.push(case("library sha256 revoked", Refused(Stage::Revoked), |d, c, p| {
        c.good(d);
        p.revoked.sha256.push(sha256_hex(&std::fs::read(&c.v1).unwrap()));
    }));
    v.push(case("manifest sha256 revoked", Refused(Stage::Revoked), |d, c, p| {
        let b = c.good(d);
        p.revoked.sha256.push(sha256_hex(&std::fs::read(b.manifest).unwrap()));
    }));
    v.push(case("signature file too large", Refused(Stage::Read), |d, c, _| {
        let b = c.good(d);
        let s = std::fs::read_to_string(&b.signature).unwrap();
        std::fs::write(&b.signature, s + &"x".repeat(2 << 20)).unwrap();
    }));

    // File system objects in place of the bundle's files.
    v.push(case("signature is a FIFO", Refused(Stage::Read), |d, c, _| mkfifo(&c.good(d).signature)));
    v.push(case("library is a FIFO", Refused(Stage::Library), |d, c, _| mkfifo(&c.good(d).library)));
    v.push(case("manifest is a FIFO", Ignored, |d, c, _| mkfifo(&c.good(d).manifest)));
    v.push(case("signature is a directory", Refused(Stage::Read), |d, c, _| {
        let b = c.good(d);
        std::fs::remove_file(&b.signature).unwrap();
        std::fs::create_dir(&b.signature).unwrap();
    }));
    v.push(case("library is a directory", Refused(Stage::Library), |d, c, _| {
        let b = c.good(d);
        std::fs::remove_file(&b.library).unwrap();
        std::fs::create_dir(&b.library).unwrap();
    }));
    v.push(case("library is a symlink to the signed library", Refused(Stage::Library), |d, c, _| {
        let b = c.good(d);
        let outside = d.join("elsewhere.so");
        std::fs::copy(&b.library, &outside).unwrap();
        replace_with_symlink(&b.library, &outside);
    }));
    v.push(case("library is a symlink to a character device", Refused(Stage::Library), |d, c, _| {
        replace_with_symlink(&c.good(d).library, Path::new("/dev/zero"));
    }));
    v.push(case("signature is a symlink to a character device", Refused(Stage::Read), |d, c, _| {
        replace_with_symlink(&c.good(d).signature, Path::new("/dev/zero"));
    }));
    v.push(case("signature is a symlink to a valid signature", Refused(Stage::Read), |d, c, _| {
        let b = c.good(d);
        let outside = d.join("sig.elsewhere");
        std::fs::rename(&b.signature, &outside).unwrap();
        replace_with_symlink(&b.signature, &outside);
    }));
    // Refused by name (the scan keeps it, so a linked manifest is not taken for a removed
    // bundle); still never read through the link.
    v.push(case("manifest is a symlink", Refused(Stage::Read), |d, c, _| {
        let b = c.good(d);
        let outside = d.join("manifest.elsewhere");
        std::fs::rename(&b.manifest, &outside).unwrap();
        replace_with_symlink(&b.manifest, &outside);
    }));
    v.push(case("library missing", Refused(Stage::Library), |d, c, _| {
        std::fs::remove_file(c.good(d).library).unwrap();
    }));
    v.push(case("library over the size limit", Refused(Stage::Library), |d, c, p| {
        c.good(d);
        p.max_library_bytes = 4096;
    }));

    // Artifact paths out of the bundle folder, signed by a trusted key.
    for file in ["../libmarker_plugin.so", "/tmp/libmarker_plugin.so", "sub/libmarker_plugin.so", "..", "", "./x.so"] {
        v.push(case(&format!("artifact file `{file}`"), Refused(Stage::Manifest), move |d, c, _| {
            let b = c.good(d);
            let text = c.manifest_text(&b).replace("file: libmarker_plugin.so", &format!("file: \"{file}\""));
            c.resign(&b, &text);
        }));
    }

    // YAML bombs and parser attacks, signed by a trusted key.
    let deep = |d: usize| format!("x: {}{}\n", "[".repeat(d), "]".repeat(d));
    for (label, extra) in [
        ("flow nesting 200k", deep(200_000)),
        ("block nesting 1k", (0..1000).map(|n| format!("{}k:\n", " ".repeat(n))).collect::<String>()),
        ("dash nesting 200k", format!("x:\n{}1\n", "- ".repeat(200_000))),
        (
            "billion laughs",
            "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                .to_owned(),
        ),
        ("tags", "x: !!binary aGVsbG8=\n".to_owned()),
        ("merge key", "base: {a: 1}\nmerged:\n  <<: {a: 2}\n".to_owned()),
    ] {
        v.push(case(&format!("yaml: {label}"), Refused(Stage::Manifest), move |d, c, _| {
            let b = c.good(d);
            let text = extra.clone() + &c.manifest_text(&b);
            c.resign(&b, &text);
        }));
    }
    v.push(case("yaml: manifest over 1 MiB", Refused(Stage::Read), |d, c, _| {
        let b = c.good(d);
        let text = format!("x: \"{}\"\n", "a".repeat(1 << 20)) + &c.manifest_text(&b);
        c.resign(&b, &text);
    }));
    v.push(case("yaml: not UTF-8", Refused(Stage::Manifest), |d, c, _| {
        let b = c.good(d);
        let mut bytes = std::fs::read(&b.manifest).unwrap();
        bytes.extend_from_slice(b"# \xff\xfe\n");
        std::fs::write(&b.manifest, &bytes).unwrap();
        let sha = sha256_hex(&std::fs::read(&c.v1).unwrap());
        std::fs::write(&b.signature, sign(&c.key.pair, &bytes, &bundle_comment(PLUGIN, "0.1.0", &sha))).unwrap();
    }));

    // Permissions (strict).
    v.push(case("library world-writable", Refused(Stage::Permissions), |d, c, _| chmod(&c.good(d).library, 0o666)));
    v.push(case("manifest group-writable", Refused(Stage::Permissions), |d, c, _| chmod(&c.good(d).manifest, 0o664)));
    v.push(case("signature world-writable", Refused(Stage::Permissions), |d, c, _| chmod(&c.good(d).signature, 0o646)));
    v.push(case("bundle folder world-writable", Refused(Stage::Permissions), |d, c, _| {
        c.good(&d.join("marker"));
        chmod(&d.join("marker"), 0o777);
    }));
    v.push(case("plugins folder world-writable", Refused(Stage::Permissions), |d, c, _| {
        let plugins = d.join("plugins-inner");
        c.good(&plugins.join("marker"));
        chmod(&plugins, 0o777);
    }));

    // Downgrades across a restart (persistent rollback record).
    v.push(case("downgrade below the rollback record", Refused(Stage::Downgrade), |d, c, p| {
        c.good(d);
        let store = RollbackStore::open(&d.join(".state")).unwrap();
        store.record(PLUGIN, &semver_of("0.2.0"), &sha256_hex(&std::fs::read(&c.v2).unwrap())).unwrap();
        p.rollback = Some(Arc::new(store));
    }));
    v.push(case("same version re-signed with other bytes (strict)", Refused(Stage::Downgrade), |d, c, p| {
        c.good(d);
        let store = RollbackStore::open(&d.join(".state")).unwrap();
        store.record(PLUGIN, &semver_of("0.1.0"), &"0".repeat(64)).unwrap();
        p.rollback = Some(Arc::new(store));
    }));
    v
}

fn semver_of(s: &str) -> semver::Version {
    semver::Version::parse(s).unwrap()
}

fn marker_lines(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker).map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default()
}

/// Scans on another thread; a scan that blocks (the FIFO attack) fails the case instead of
/// hanging the suite.
fn scan_with_deadline(host: &Arc<Host>, name: &str) -> quiver_lifecycle::ScanReport {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = host.clone();
    std::thread::spawn(move || {
        let _ = tx.send(h.rescan());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{name}: the scan blocked"))
}

#[test]
fn hostile_bundles_never_run_plugin_code() {
    plugin_library(PLUGIN, &[]);
    plugin_library(PLUGIN, V2);
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("marker.txt");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "attacks::attack_child", "--nocapture", "--test-threads=1"])
        .env("QUIVER_TEST_MARKER", &marker)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran the cases:\n{text}");
    assert!(text.contains("attack cases:"), "{text}");
}

#[test]
fn attack_child() {
    let Some(marker) = std::env::var_os("QUIVER_TEST_MARKER").map(PathBuf::from) else {
        assert!(std::env::var_os(CHILD_ENV).is_none());
        return;
    };
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let ctx = Ctx {
        key: TestKey::generate(),
        stranger: TestKey::generate(),
        v1: plugin_library(PLUGIN, &[]),
        v2: plugin_library(PLUGIN, V2),
    };
    let cases = cases();
    let mut names = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for (name, expect, build) in &cases {
        assert!(names.insert(name.clone()), "duplicate case name {name}");
        let root = tempfile::tempdir().unwrap();
        let mut policy = VerifyPolicy { trusted: trusted(&ctx), ..VerifyPolicy::default() };
        build(root.path(), &ctx, &mut policy);
        let plugins_dir = if root.path().join("plugins-inner").is_dir() {
            root.path().join("plugins-inner")
        } else {
            root.path().to_owned()
        };
        let host = Arc::new(
            Host::new(HostSettings {
                plugins_dir,
                verify: policy,
                cache_dir: None,
                conflicts: Default::default(),
                isolation: Default::default(),
            })
            .unwrap(),
        );
        let report = scan_with_deadline(&host, name);
        let got = match report.rejected.as_slice() {
            [] if report.added.is_empty() => Expect::Ignored,
            [one] => Expect::Refused(one.stage),
            _ => {
                failures.push(format!("{name}: unexpected report {report:?}"));
                continue;
            }
        };
        if !report.added.is_empty() || !host.catalog().tools().is_empty() {
            failures.push(format!("{name}: a plugin loaded: {report:?}"));
        }
        if got != *expect {
            failures.push(format!("{name}: expected {expect:?}, got {got:?}: {:?}", report.rejected));
        }
        if let Expect::Refused(stage) = got {
            assert!(stage.before_load(), "{name}: {stage:?} is a check after load");
        }
        let lines = marker_lines(&marker);
        assert!(lines.is_empty(), "{name}: PLUGIN CODE RAN: {lines:?}");
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(cases.len() >= 60, "{} cases", cases.len());
    println!("attack cases: {} refused, no plugin code ran", cases.len());

    // Control: a good bundle does run its constructor, so the marker would have shown a load.
    let root = tempfile::tempdir().unwrap();
    ctx.good(root.path());
    let host = Host::new(HostSettings {
        plugins_dir: root.path().to_owned(),
        verify: VerifyPolicy { trusted: trusted(&ctx), ..VerifyPolicy::default() },
        cache_dir: None,
        conflicts: Default::default(),
        isolation: Default::default(),
    })
    .unwrap();
    assert_eq!(host.rescan().added.len(), 1);
    assert_eq!(marker_lines(&marker), vec!["constructor ran: marker-plugin 0.1.0"]);
}

/// The library is swapped (rename, like an atomic update) between the signed build and an
/// unsigned one while the host rescans: the unsigned build's constructor must never run. Runs in
/// a child process with the marker on.
#[test]
fn swapping_the_library_during_rescans_never_loads_unsigned_code() {
    plugin_library(PLUGIN, &[]);
    plugin_library(PLUGIN, V2);
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("marker.txt");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "attacks::swap_child", "--nocapture", "--test-threads=1"])
        .env("QUIVER_TEST_MARKER", &marker)
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "child failed:\n{text}");
    let lines = marker_lines(&marker);
    assert!(lines.iter().all(|l| l.ends_with("0.1.0")), "the swapped-in build ran: {lines:?}");
    assert_eq!(lines, ["constructor ran: marker-plugin 0.1.0"], "the signed build loaded once");
}

#[test]
fn swap_child() {
    if std::env::var_os(CHILD_ENV).is_none() || std::env::var_os("QUIVER_TEST_MARKER").is_none() {
        return;
    }
    let key = TestKey::generate();
    let (v1, v2) = (plugin_library(PLUGIN, &[]), plugin_library(PLUGIN, V2));
    let root = tempfile::tempdir().unwrap();
    let b = write_bundle(root.path(), PLUGIN, &v1, None, Some(&key));
    let good = Arc::new(std::fs::read(&v1).unwrap());
    let evil = std::fs::read(&v2).unwrap();
    let mut t = TrustedKeys::default();
    t.add("test", "test", PublicKey::parse(&key.public_text()).unwrap());
    let host = Arc::new(
        Host::new(HostSettings {
            plugins_dir: root.path().to_owned(),
            verify: VerifyPolicy { trusted: t, ..VerifyPolicy::default() },
            cache_dir: None,
            conflicts: Default::default(),
            isolation: Default::default(),
        })
        .unwrap(),
    );
    // The signed build loads; then its library is swapped back and forth under the rescans.
    let first = host.rescan();
    assert_eq!(first.added.len(), 1, "{first:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, lib, good) = (stop.clone(), b.library.clone(), good.clone());
        std::thread::spawn(move || {
            let tmp = lib.with_extension("swap");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let bytes: &[u8] = if n.is_multiple_of(2) { &evil } else { &good };
                std::fs::write(&tmp, bytes).unwrap();
                std::fs::rename(&tmp, &lib).unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    let mut loaded = 0;
    let mut rejected = 0;
    for _ in 0..100 {
        let r = host.rescan();
        loaded += r.added.len() + r.replaced.len();
        rejected += r.rejected.len();
        std::thread::sleep(Duration::from_millis(3));
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    println!("swaps {swaps}, loads {loaded}, rejections {rejected}");
    assert!(swaps > 10, "the swapper ran");
    assert!(rejected > 0, "some scans saw the unsigned build and refused it");
    // (A scan that finds the signed bytes back keeps the loaded instance; the host reports it as
    // a replacement of 0.1.0 by 0.1.0, counted in `loaded`: the marker shows nothing new ran.)
    let sha = sha256_hex(&good);
    for plugin in host.catalog().plugins() {
        assert_eq!(plugin.provenance.sha256, sha, "only the signed bytes are loaded");
    }
    for plugin in host.catalog().plugins() {
        assert_eq!(plugin.manifest.version.to_string(), "0.1.0");
    }
}

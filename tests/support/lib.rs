//! Support for Quiver's end-to-end tests: builds real plugin libraries with cargo and packs them
//! into signed bundles in temporary folders, exactly as an author would.
//!
//! Plugins are built into `target/test-plugins` (a separate target folder: the `cargo test`
//! that runs the tests may hold the lock on `target/`). Builds run once per process and
//! variant. This crate does not load plugins or run the host; tests do that with the real crates.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use quiver_manifest::{KeyPair, sha256_hex};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_owned()
}

/// Builds `package` (a cdylib workspace member) in debug mode, with extra compile-time
/// environment (`env`), and returns a stable copy of its library unique to that variant.
/// Panics with cargo's output when the build fails.
pub fn plugin_library(package: &str, env: &[(&str, &str)]) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let key = format!("{package}{env:?}");
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(k, _)| *k == key) {
        return p.clone();
    }
    let root = workspace_root();
    // A variant with compile-time env gets its own target folder, so builds of different
    // variants (possibly from several test processes) never overwrite each other's output.
    let variant: String = env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    let target_dir = if env.is_empty() {
        root.join("target/test-plugins")
    } else {
        root.join("target/test-plugins-variants").join(sanitize(&variant))
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root).args(["build", "--quiet", "-p", package, "--target-dir"]).arg(&target_dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building plugin {package} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lib = target_dir.join("debug").join(library_file_name(package));
    assert!(lib.is_file(), "cargo built {package} but {} is missing", lib.display());
    let stable = stable_copy(&lib, &target_dir, &variant, package);
    built.push((key, stable.clone()));
    stable
}

/// A copy of the freshly built `lib` that a later rebuild of the same target folder cannot
/// change, named after the build it came from (its modification time and size): every test
/// process using that build shares one copy (one per process filled the disk: a test run made
/// hundreds of 20 MB copies), and the copy is made by a rename, so no process sees half of one.
fn stable_copy(lib: &Path, target_dir: &Path, variant: &str, package: &str) -> PathBuf {
    let meta = std::fs::metadata(lib).expect("stat the built library");
    let built_at =
        meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
    let name = format!("{built_at}-{}-{}-{}", meta.len(), sanitize(variant), library_file_name(package));
    let stable = target_dir.join(name);
    if !stable.is_file() {
        let partial = target_dir.join(format!(".{}-{}.partial", std::process::id(), library_file_name(package)));
        std::fs::copy(lib, &partial).expect("copy library");
        std::fs::rename(&partial, &stable).expect("rename the library copy");
    }
    stable
}

/// Builds `package` in release mode (for benchmarks) into `target/bench-plugins`; returns the
/// library. Panics with cargo's output when the build fails.
pub fn plugin_library_release(package: &str) -> PathBuf {
    let root = workspace_root();
    let target_dir = root.join("target/bench-plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--quiet", "--release", "-p", package, "--target-dir"])
        .arg(&target_dir)
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "building plugin {package} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    target_dir.join("release").join(library_file_name(package))
}

/// Builds one library of `package` per value of the compile-time variable `var` (for example
/// many versions for hot-swap tests), in one target folder: only the plugin crate itself is
/// rebuilt per value. Returns stable copies, in the order of `values`.
pub fn plugin_library_versions(package: &str, var: &str, values: &[String]) -> Vec<PathBuf> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let root = workspace_root();
    let target_dir = root.join("target/test-plugins-variants").join(sanitize(&format!("{package}-{var}")));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    values
        .iter()
        .map(|value| {
            let out = Command::new(&cargo)
                .current_dir(&root)
                .args(["build", "--quiet", "-p", package, "--target-dir"])
                .arg(&target_dir)
                .env(var, value)
                .output()
                .expect("cargo runs");
            assert!(
                out.status.success(),
                "building plugin {package} with {var}={value} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let lib = target_dir.join("debug").join(library_file_name(package));
            stable_copy(&lib, &target_dir, value, package)
        })
        .collect()
}

/// A file-name-safe form of `s`; long ones are cut and end with a hash of the whole (file
/// names have a length limit).
fn sanitize(s: &str) -> String {
    let safe: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    if safe.len() <= 64 {
        return safe;
    }
    format!("{}-{}", &safe[..48], &sha256_hex(s.as_bytes())[..12])
}

/// `lib<crate_name>.so` for a package name.
pub fn library_file_name(package: &str) -> String {
    format!("{}{}{}", std::env::consts::DLL_PREFIX, package.replace('-', "_"), std::env::consts::DLL_SUFFIX)
}

/// A signing key for tests, with its public half.
pub struct TestKey {
    /// The key pair.
    pub pair: KeyPair,
}

impl TestKey {
    /// A fresh key.
    pub fn generate() -> TestKey {
        TestKey { pair: KeyPair::generate() }
    }
    /// The minisign public key file text.
    pub fn public_text(&self) -> String {
        self.pair.public_key_text()
    }
}

/// The files of one bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// `NAME.tool.yaml`.
    pub manifest: PathBuf,
    /// `NAME.tool.yaml.minisig`.
    pub signature: PathBuf,
    /// The library.
    pub library: PathBuf,
}

/// Writes a signed bundle of `package` into `dir`: the library (copied from `library`), the
/// source `tool.yaml` (or `manifest_text`) with an `artifact` section appended, and its minisign
/// signature by `key` (no signature when `key` is `None`).
pub fn write_bundle(
    dir: &Path,
    package: &str,
    library: &Path,
    manifest_text: Option<&str>,
    key: Option<&TestKey>,
) -> Bundle {
    write_bundle_shipping(dir, package, library, manifest_text, None, key)
}

/// [`write_bundle`], shipping `report` as the bundle's load report (`PACKAGE.report.json`, its
/// sha256 in the signed `artifact.report`) when given, as `quiver sign --report` does.
pub fn write_bundle_shipping(
    dir: &Path,
    package: &str,
    library: &Path,
    manifest_text: Option<&str>,
    report: Option<&str>,
    key: Option<&TestKey>,
) -> Bundle {
    std::fs::create_dir_all(dir).expect("bundle dir");
    let lib_name = library_file_name(package);
    let lib_dest = dir.join(&lib_name);
    let bytes = std::fs::read(library).expect("read library");
    // Write to a temporary name and rename, so a scanning host never sees half a file.
    let tmp = dir.join(format!(".{lib_name}.tmp"));
    std::fs::write(&tmp, &bytes).expect("write library");
    std::fs::rename(&tmp, &lib_dest).expect("rename library");
    let source = match manifest_text {
        Some(t) => t.to_owned(),
        None => std::fs::read_to_string(workspace_root().join(source_dir(package)).join("tool.yaml"))
            .expect("source tool.yaml"),
    };
    let report = report.map(|r| {
        let file = format!("{package}.report.json");
        std::fs::write(dir.join(&file), r).expect("write the load report");
        quiver_manifest::ReportFile { file, sha256: sha256_hex(r.as_bytes()) }
    });
    let artifact = quiver_manifest::Artifact { file: lib_name.clone(), sha256: sha256_hex(&bytes), report };
    let text = quiver_manifest::with_artifact_text(&source, &artifact);
    let manifest = dir.join(format!("{package}.tool.yaml"));
    let signature = dir.join(format!("{package}.tool.yaml.minisig"));
    match key {
        Some(k) => {
            let sig = quiver_manifest::sign_bundle(&k.pair, &text, package).expect("the bundle manifest is valid");
            std::fs::write(&signature, sig).expect("write signature");
        }
        None => {
            let _ = std::fs::remove_file(&signature);
        }
    }
    std::fs::write(&manifest, &text).expect("write manifest");
    Bundle { manifest, signature, library: lib_dest }
}

/// Where a package's sources live (`plugins/NAME` or `tests/plugins/NAME`).
pub fn source_dir(package: &str) -> PathBuf {
    let root = workspace_root();
    let p = Path::new("plugins").join(package);
    if root.join(&p).is_dir() { p } else { Path::new("tests/plugins").join(package) }
}

/// The headers of a JSON-RPC POST to the streamable HTTP transport.
pub const MCP_POST_HEADERS: [(&str, &str); 2] =
    [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];

/// Opens an initialized MCP session on `quiver serve --http` at `addr` as the holder of bearer
/// `token`, announcing itself as `client`; returns the `Mcp-Session-Id`.
pub fn open_http_session(addr: &str, token: &str, client: &str) -> String {
    let auth = format!("Bearer {token}");
    let [json, accept] = MCP_POST_HEADERS;
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": client, "version": "1"}}});
    let (status, headers, body) =
        http_post(addr, &[json, accept, ("Authorization", &auth)], init.to_string().as_bytes());
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let session = headers.iter().find(|(k, _)| k == "mcp-session-id").expect("an Mcp-Session-Id header").1.clone();
    let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, _, _) =
        http_post(addr, &[json, accept, ("Mcp-Session-Id", &session), ("Authorization", &auth)], note.as_bytes());
    assert_eq!(status, 202, "notifications/initialized is accepted");
    session
}

/// One HTTP/1.1 request to `http://addr/mcp` (blocking, `Connection: close`); returns the status
/// and the body, de-chunked. For tests that drive `quiver serve --http` from plain threads.
pub fn http_post(addr: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut req =
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("write");
    stream.write_all(body).expect("write body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    split_response(&raw)
}

/// One HTTP/1.1 `GET path` to `addr` (blocking, `Connection: close`); returns the status, the
/// headers (names lower-cased) and the body, de-chunked.
pub fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    split_response(&raw)
}

fn split_response(raw: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let rest = &raw[split + 4..];
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned())))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(rest) } else { rest.to_vec() };
    (status, headers, body)
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = nl + 2;
        let end = (start + size).min(rest.len());
        out.extend_from_slice(&rest[start..end]);
        rest = rest.get(end + 2..).unwrap_or_default();
    }
    out
}

/// The JSON-RPC messages of an MCP HTTP response body (JSON, or server-sent events).
pub fn mcp_messages(body: &[u8]) -> Vec<serde_json::Value> {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str(&text) {
        return vec![v];
    }
    text.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

//! One mapping from a profile's `approval` to what a session does, whatever the command:
//! `quiver call` and `quiver replay` follow the profile as `quiver serve` does (`ask`: only
//! confirmed calls run, `--yes` confirms; `deny` is final, `--yes` included; `allow` runs).

use std::path::Path;
use std::process::{Command, Output};

use quiver_tests::TestKey;
use serde_json::Value;

/// A command adapter whose one tool needs a person's confirmation.
const NOTE_ADAPTER: &str = r#"manifest_version: 1
id: note-writer
version: 0.1.0
display_name: Note writer
description: Pretends to write a note.
abi: 1
adapter:
  command:
    program: jq
tools:
  - name: note_write
    title: Write a note
    description: Writes a note (needs confirmation).
    side_effects: write
    policies: {confirmation: true}
    input_schema:
      type: object
      properties:
        text: {type: string}
      required: [text]
    invoke:
      args: ["-n", "-c", "--args", "$ARGS.positional", "{text}"]
"#;

fn project(dir: &Path) {
    let key = TestKey::generate();
    let plugin = dir.join("plugins/note-writer");
    std::fs::create_dir_all(&plugin).unwrap();
    let manifest = plugin.join("note-writer.tool.yaml");
    std::fs::write(&manifest, NOTE_ADAPTER).unwrap();
    let sig = quiver_manifest::sign_bundle(&key.pair, NOTE_ADAPTER, "note-writer").unwrap();
    std::fs::write(quiver_lifecycle::signature_path(&manifest), sig).unwrap();
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    std::fs::write(
        dir.join("quiver.yaml"),
        format!(
            "plugins_dir: plugins\nrescan_interval_ms: 0\ntrusted_keys: [{{name: test, key: {key_line}}}]\n\
             transcripts: {{dir: transcripts}}\ndefault_profile: asker\n\
             profiles:\n  asker: {{approval: ask}}\n  denier: {{approval: deny}}\n  allower: {{approval: allow}}\n"
        ),
    )
    .unwrap();
}

fn quiver(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.current_dir(dir).args(args).env_remove("RUST_LOG").env("XDG_CONFIG_HOME", dir.join("xdg"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("QUIVER_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().expect("cannot run quiver")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

/// The one transcript the project's calls wrote.
fn transcript(dir: &Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir.join("transcripts")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn call_follows_the_profiles_approval() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let args = ["--json", "call", "note_write", "--args", r#"{"text": "hi"}"#, "--profile"];
    let code = |profile: &str, yes: bool| {
        let mut a: Vec<&str> = args.to_vec();
        a.push(profile);
        if yes {
            a.push("--yes");
        }
        let out = quiver(dir.path(), &a);
        json(&out)["response"]["error"]["code"].as_str().map(str::to_owned)
    };
    // ask: refused until confirmed, and `--yes` confirms.
    assert_eq!(code("asker", false).as_deref(), Some("confirmation_required"));
    assert_eq!(code("asker", true), None);
    // deny is final.
    assert_eq!(code("denier", false).as_deref(), Some("permission_denied"));
    assert_eq!(code("denier", true).as_deref(), Some("permission_denied"));
    // allow runs.
    assert_eq!(code("allower", false), None);
}

#[test]
fn replay_follows_the_profiles_approval() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let out = quiver(dir.path(), &["call", "note_write", "--args", r#"{"text": "hi"}"#, "--profile", "asker", "--yes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = transcript(dir.path());
    let path = path.to_str().unwrap();
    let verdict = |profile: &str, yes: bool| {
        let mut a = vec!["--json", "replay", path, "--profile", profile];
        if yes {
            a.push("--yes");
        }
        let v = json(&quiver(dir.path(), &a));
        (v["entries"][0]["verdict"].as_str().unwrap().to_owned(), v["entries"][0]["detail"].to_string())
    };
    // Under `ask`, a call recorded as confirmed runs again without `--yes`.
    let (v, detail) = verdict("asker", false);
    assert_eq!(v, "identical", "{detail}");
    // `deny` is final: `--yes` does not override the profile.
    let (v, detail) = verdict("denier", true);
    assert_ne!(v, "identical", "{detail}");
    assert!(detail.contains("permission_denied"), "{detail}");
    let (v, detail) = verdict("allower", false);
    assert_eq!(v, "identical", "{detail}");
}

//! Setting the CLI up: shell completions, man pages, `QUIVER_*` environment overrides and the
//! configuration lookup (`--config`, `./quiver.yaml`, the XDG config folder).

use std::fs;
use std::process::Command;

use super::Project;

fn tool_names(v: &serde_json::Value) -> Vec<String> {
    v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn completions_load_in_bash_and_cover_every_shell() {
    let p = Project::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = p.quiver(&["completions", shell]).success().stdout();
        assert!(out.contains("serve") && out.contains("plugins") && out.contains("allow-host"), "{shell}:\n{out}");
    }
    // bash really accepts the script and registers a completion function for `quiver`.
    let script = p.quiver(&["completions", "bash"]).success().stdout();
    fs::write(p.path("quiver.bash"), script).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p quiver", p.path("quiver.bash").display()))
        .output()
        .unwrap();
    let registered = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && registered.contains("quiver"),
        "{registered}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Completing `quiver se` offers the subcommands starting with it.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && COMP_WORDS=(quiver se) COMP_CWORD=1 COMP_LINE='quiver se' COMP_POINT=9 && _quiver quiver se quiver && echo \"${{COMPREPLY[@]}}\"",
            p.path("quiver.bash").display()
        ))
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    assert!(offered.contains("serve") && offered.contains("search") && !offered.contains("list"), "{offered}");
    p.quiver(&["completions", "tcsh"]).failure(2);
}

#[test]
fn man_pages_render_and_name_the_environment() {
    let p = Project::new();
    let page = p.quiver(&["man"]).success().stdout();
    assert!(page.contains(".TH quiver 1"), "{page}");
    assert!(page.contains("QUIVER_CONFIG") && page.contains("QUIVER_PLUGINS"), "{page}");
    let run = p.quiver(&["man", "--out-dir", "man"]).success();
    assert!(run.stdout().is_empty(), "pages go to files: {}", run.stdout());
    for page in ["quiver.1", "quiver-serve.1", "quiver-completions.1", "quiver-config.1"] {
        assert!(p.path("man").join(page).is_file(), "{page} missing");
    }
    // man(1) renders the serve page, environment variables included.
    let out = Command::new("man")
        .arg("-l")
        .arg(p.path("man/quiver-serve.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("QUIVER_HTTP") && text.contains("--allow-host"), "{text}");
}

#[test]
fn environment_overrides_the_main_options_and_flags_win() {
    let p = Project::new();
    fs::create_dir_all(p.path("empty")).unwrap();
    // QUIVER_PLUGINS points at an empty folder: no tools.
    let v = p.quiver(&["list", "--json"]).env("QUIVER_PLUGINS", p.path("empty")).success().json();
    assert!(tool_names(&v).is_empty(), "{v}");
    // The flag wins over the variable.
    let v =
        p.quiver(&["list", "--json", "--plugins", "plugins"]).env("QUIVER_PLUGINS", p.path("empty")).success().json();
    assert_eq!(tool_names(&v), ["marker_echo", "marker_panic", "marker_sleep"]);
    // QUIVER_JSON switches on JSON output.
    let v = p.quiver(&["list"]).env("QUIVER_JSON", "1").success().json();
    assert_eq!(tool_names(&v).len(), 3);
    let text = p.quiver(&["list"]).env("QUIVER_JSON", "false").success().stdout();
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_err(), "{text}");
    // QUIVER_CONFIG names another file; a missing one is an error that names the variable.
    fs::write(p.path("alt.yaml"), "plugins_dir: empty\n").unwrap();
    let v = p.quiver(&["config", "--json"]).env("QUIVER_CONFIG", "alt.yaml").success().json();
    assert_eq!(v["origin"], "--config / QUIVER_CONFIG");
    assert!(v["plugins_dir"].as_str().unwrap().ends_with("empty"), "{v}");
    // Every setting, the defaults filled in.
    assert_eq!(v["settings"]["plugins_dir"], "empty", "{v}");
    assert_eq!(v["settings"]["rescan_interval_ms"], 3000, "{v}");
    let text = p.quiver(&["config"]).env("QUIVER_CONFIG", "alt.yaml").success().stdout();
    assert!(text.contains("  rescan_interval_ms: 3000") && text.contains("  plugins_dir: empty"), "{text}");
    let run = p.quiver(&["list"]).env("QUIVER_CONFIG", "nope.yaml").failure(1);
    assert!(run.stderr().contains("nope.yaml") && run.stderr().contains("QUIVER_CONFIG"), "{}", run.stderr());
    // serve reads QUIVER_PROFILE: an unknown one is refused before serving.
    let run = p.quiver(&["serve"]).env("QUIVER_PROFILE", "no-such-profile").failure(2);
    assert!(run.stderr().contains("no-such-profile"), "{}", run.stderr());
}

#[test]
fn config_is_found_in_the_working_folder_then_the_xdg_folder() {
    let p = Project::new();
    fs::create_dir_all(p.path("elsewhere")).unwrap();
    // The user's config, in $XDG_CONFIG_HOME/quiver/, with paths relative to its own folder.
    fs::create_dir_all(p.path("xdg/quiver")).unwrap();
    fs::write(
        p.path("xdg/quiver/quiver.yaml"),
        "plugins_dir: ../../plugins\ntrusted_keys:\n  - name: test\n    path: ../../keys/test.pub\n",
    )
    .unwrap();
    let v = p.quiver_in(&p.path("elsewhere"), &["config", "--json"]).success().json();
    assert_eq!(v["origin"], "XDG config folder", "{v}");
    assert_eq!(v["config_file"], p.path("xdg/quiver/quiver.yaml").display().to_string());
    let v = p.quiver_in(&p.path("elsewhere"), &["list", "--json"]).success().json();
    assert_eq!(tool_names(&v).len(), 3, "{v}");

    // ./quiver.yaml comes first: the project's config wins over the user's.
    fs::write(p.path("xdg/quiver/quiver.yaml"), "plugins_dir: /nonexistent\n").unwrap();
    let v = p.quiver(&["config", "--json"]).success().json();
    assert_eq!(v["origin"], "./quiver.yaml", "{v}");
    assert_eq!(tool_names(&p.quiver(&["list", "--json"]).success().json()).len(), 3);

    // Without XDG_CONFIG_HOME the folder is ~/.config.
    fs::create_dir_all(p.path("home/.config/quiver")).unwrap();
    fs::write(p.path("home/.config/quiver/quiver.yaml"), "plugins_dir: /from-home\n").unwrap();
    let v = p
        .quiver_in(&p.path("elsewhere"), &["config", "--json"])
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", p.path("home"))
        .success()
        .json();
    assert_eq!(v["origin"], "XDG config folder", "{v}");
    assert_eq!(v["plugins_dir"], "/from-home");

    // Nothing anywhere: the built-in defaults, and the human output says where it looked.
    let run = p.quiver_in(&p.path("elsewhere"), &["config"]).env("XDG_CONFIG_HOME", p.path("none")).success();
    assert!(
        run.stdout().contains("none (built-in defaults)") && run.stdout().contains("quiver.yaml"),
        "{}",
        run.stdout()
    );
}

//! The bundled fs-tools plugin's compatibility names, through the real router: hidden and
//! deprecated names are absent from search yet dispatch with the same result as the canonical
//! tool; only their metadata differs.

use std::sync::Arc;

use quiver_abi::Status;
use quiver_catalog::{Access, SearchRequest, search_catalog};
use quiver_lifecycle::{Host, HostSettings, VerifyPolicy};
use quiver_manifest::LifecycleState;
use quiver_manifest::{PublicKey, TrustedKeys};
use quiver_router::{Call, CallOutcome, Caller, Router, RouterSettings};
use quiver_tests::{TestKey, plugin_library, write_bundle};
use serde_json::{Value, json};

struct Setup {
    router: Router,
    host: Arc<Host>,
    root: tempfile::TempDir,
    _plugins: tempfile::TempDir,
}

fn setup() -> Setup {
    let key = TestKey::generate();
    let plugins = tempfile::tempdir().unwrap();
    write_bundle(plugins.path(), "fs-tools", &plugin_library("fs-tools", &[]), None, Some(&key));
    let trusted = TrustedKeys::new().with("test", "test", PublicKey::parse(&key.public_text()).unwrap());
    let host = Arc::new(
        Host::new(HostSettings {
            plugins_dir: plugins.path().to_owned(),
            verify: VerifyPolicy {
                trusted,
                allow_unsigned: false,
                max_library_bytes: 64 << 20,
                ..VerifyPolicy::default()
            },
            cache_dir: None,
            conflicts: Default::default(),
            isolation: Default::default(),
        })
        .unwrap(),
    );
    let report = host.rescan();
    assert_eq!(report.added.len(), 1, "{report:?}");
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("notes.txt"), "first line\nsecond line\n").unwrap();
    let settings = RouterSettings {
        plugin_config: [("fs-tools".to_owned(), json!({"root": root.path()}))].into_iter().collect(),
        ..RouterSettings::default()
    };
    let router = Router::new(host.clone(), settings);
    Setup { router, host, root, _plugins: plugins }
}

fn caller() -> Caller {
    Caller::new("aliases", Access::unrestricted())
}

async fn call(s: &Setup, name: &str, args: Value) -> CallOutcome {
    s.router.call(Call::new(name, args, caller()).confirmed(true)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compatibility_names_dispatch_like_the_canonical_tool_but_are_never_found() {
    let s = setup();
    let canonical = call(&s, "fs_read", json!({"path": "notes.txt"})).await;
    assert_eq!(canonical.response.status, Status::Ok, "{:?}", canonical.response.error);
    assert!(canonical.meta.notice.is_none());
    for (name, state) in [("read_file", LifecycleState::Deprecated), ("cat", LifecycleState::HiddenCompatibility)] {
        let o = call(&s, name, json!({"path": "notes.txt"})).await;
        assert_eq!(o.response.status, Status::Ok);
        assert_eq!(o.response.outputs, canonical.response.outputs, "{name} answers exactly like fs_read");
        assert_eq!(o.meta.tool(), Some("fs_read"));
        let notice = o.meta.notice.expect("a notice in the result metadata");
        assert_eq!(notice.state, state);
        assert_eq!(notice.replacement.as_deref(), Some("fs_read"));
        if state == LifecycleState::Deprecated {
            assert!(
                notice.message().contains("deprecated since 0.1.0 and will be removed in 1.0.0"),
                "{}",
                notice.message()
            );
        }
    }

    // Search never returns them, whatever the query.
    let catalog = s.host.catalog();
    for q in ["read_file", "cat", "read file", "write_file", "delete_file", "cat a file"] {
        let r = search_catalog(
            &catalog,
            &Access::unrestricted(),
            &SearchRequest { query: q.into(), ..Default::default() },
            50,
        )
        .unwrap();
        for t in &r.tools {
            assert!(
                !["read_file", "cat", "write_file", "delete_file"].contains(&t.name.as_str()),
                "{q} found {}",
                t.name
            );
        }
    }

    // A consolidated tool's aliases fill in their action: same effect as the canonical call.
    let o = call(&s, "write_file", json!({"path": "a.txt", "content": "via alias"})).await;
    assert_eq!(o.response.status, Status::Ok, "{:?}", o.response.error);
    assert_eq!((o.meta.tool(), o.meta.action.as_deref()), (Some("fs_edit"), Some("write")));
    let c = call(&s, "fs_edit", json!({"action": "write", "path": "b.txt", "content": "via alias"})).await;
    assert_eq!(c.response.status, Status::Ok);
    assert_eq!(
        std::fs::read(s.root.path().join("a.txt")).unwrap(),
        std::fs::read(s.root.path().join("b.txt")).unwrap()
    );
    let d = call(&s, "delete_file", json!({"path": "a.txt"})).await;
    assert_eq!(d.response.status, Status::Ok, "{:?}", d.response.error);
    assert_eq!(d.meta.action.as_deref(), Some("delete"));
    assert!(!s.root.path().join("a.txt").exists());
}

//! Catalog tests on synthetic plugins (no libraries: the backend echoes).

use std::sync::Arc;

use proptest::prelude::*;
use quiver_abi::{PluginInfo, ToolSchemas};
use quiver_manifest::{
    ActionSpec, AliasSpec, LifecycleSpec, LifecycleState, Manifest, PolicySpec, SideEffects, ToolSpec,
};
use serde_json::json;

use crate::{
    Access, CallSink, Catalog, ConflictPolicy, ExposureMode, PluginEntry, Provenance, SearchRequest, Session,
    SurfacePolicy, ToolBackend, partitions, search_catalog,
};

struct Echo;
impl ToolBackend for Echo {
    fn invoke(&self, _tool: &str, request: &str, _sink: Arc<dyn CallSink>) -> String {
        request.to_owned()
    }
}

fn tool(name: &str, state: LifecycleState, domain: &str, scopes: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        title: format!("Title of {name}"),
        description: format!("Does the {} thing. More words follow here.", name.replace('_', " ")),
        input_schema: None,
        output_schema: None,
        domain: domain.to_owned(),
        capabilities: vec![],
        aliases: vec![],
        prompt_snippet: String::new(),
        side_effects: SideEffects::Read,
        idempotent: false,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        policies: PolicySpec::default(),
        lifecycle: LifecycleSpec { state, ..LifecycleSpec::default() },
        actions: vec![],
        examples: vec![],
        secrets: vec![],
        invoke: None,
    }
}

fn alias(name: &str, state: LifecycleState) -> AliasSpec {
    AliasSpec {
        name: name.to_owned(),
        state,
        action: None,
        first_deprecated_version: Some("0.1.0".parse().unwrap()),
        planned_removal_version: Some("1.0.0".parse().unwrap()),
        removed_in_version: (state == LifecycleState::Removed).then(|| "0.2.0".parse().unwrap()),
        replay_supported: true,
    }
}

fn plugin(id: &str, tools: Vec<ToolSpec>) -> Arc<PluginEntry> {
    let input = json!({"type": "object", "properties": {"path": {"type": "string", "description": "A path"}}, "required": ["path"]});
    Arc::new(entry_with(id, tools, input).expect("entry builds"))
}

/// A plugin entry for `tools`, each implemented with `input_schema` (and an object output).
fn entry_with(
    id: &str,
    tools: Vec<ToolSpec>,
    input_schema: serde_json::Value,
) -> Result<PluginEntry, crate::EntryError> {
    let info = PluginInfo {
        abi_version: 1,
        sdk_version: "1.0.0".into(),
        manifest: String::new(),
        tools: tools
            .iter()
            .map(|t| ToolSchemas {
                name: t.name.clone(),
                input_schema: input_schema.clone(),
                output_schema: json!({"type": "object"}),
                actions: Vec::new(),
            })
            .collect(),
    };
    let manifest = Manifest {
        manifest_version: 1,
        id: id.to_owned(),
        version: "0.1.0".parse().unwrap(),
        display_name: id.to_owned(),
        description: "test".into(),
        abi: 1,
        artifact: None,
        adapter: None,
        sandbox: Default::default(),
        config_schema: None,
        tools,
        hooks: Default::default(),
    };
    let prov = Provenance { sha256: "0".repeat(64), signer_key_id: None, manifest_path: format!("{id}.tool.yaml") };
    PluginEntry::new(manifest, &info, prov, Arc::new(Echo))
}

/// A small catalog with every lifecycle state, aliases, scopes and a consolidated tool.
fn sample() -> Catalog {
    use LifecycleState::*;
    let mut read = tool("fs_read", Active, "filesystem", &["fs.read"]);
    read.aliases = vec![alias("read_file", Deprecated), alias("cat", HiddenCompatibility), alias("slurp", Removed)];
    let mut edit = tool("fs_edit", Active, "filesystem", &["fs.write"]);
    edit.side_effects = SideEffects::Destructive;
    edit.actions = vec![
        ActionSpec {
            name: "write".into(),
            description: "write".into(),
            side_effects: SideEffects::Write,
            scopes: vec![],
            confirmation: None,
        },
        ActionSpec {
            name: "delete".into(),
            description: "delete".into(),
            side_effects: SideEffects::Destructive,
            scopes: vec![],
            confirmation: None,
        },
    ];
    let mut del = alias("delete_file", HiddenCompatibility);
    del.action = Some("delete".into());
    edit.aliases = vec![del];
    let mut old = tool("fs_old_list", Deprecated, "filesystem", &["fs.read"]);
    old.lifecycle.replacement = Some("fs_list".into());
    let fs = plugin(
        "fs-tools",
        vec![
            read,
            edit,
            tool("fs_list", Active, "filesystem", &["fs.read"]),
            tool("fs_search", Deferred, "filesystem", &["fs.read"]),
            tool("fs_secret", Deferred, "filesystem", &["fs.admin"]),
            old,
        ],
    );
    let time = plugin(
        "time-tools",
        vec![
            tool("time_now", Active, "time", &[]),
            tool("date_diff", Deferred, "time", &[]),
            tool("date_add", Deferred, "time", &[]),
        ],
    );
    Catalog::build(vec![time, fs], ConflictPolicy::Error).expect("catalog builds")
}

fn session(mode: ExposureMode, scopes: &[&str]) -> Session {
    Session::new("s", SurfacePolicy { mode, ..SurfacePolicy::default() }, Access::new(scopes.iter().copied(), []))
}

#[test]
fn names_resolve_in_every_state() {
    let c = sample();
    let r = c.resolve("read_file").unwrap();
    assert_eq!(r.tool.name, "fs_read");
    assert_eq!(r.state, LifecycleState::Deprecated);
    let n = r.notice("read_file").unwrap();
    assert!(
        n.message().contains("deprecated since 0.1.0 and will be removed in 1.0.0; call `fs_read` instead"),
        "{}",
        n.message()
    );
    assert_eq!(c.resolve("cat").unwrap().state, LifecycleState::HiddenCompatibility);
    let removed = c.resolve("slurp").unwrap();
    assert!(!removed.state.is_dispatchable());
    assert!(
        removed.notice("slurp").unwrap().message().contains("was removed in version 0.2.0; call `fs_read` instead")
    );
    let d = c.resolve("delete_file").unwrap();
    assert_eq!((d.tool.name.as_str(), d.action), ("fs_edit", Some("delete")));
    assert_eq!(d.def.side_effects_for(d.action), SideEffects::Destructive);
    assert_eq!(d.def.side_effects_for(Some("write")), SideEffects::Write);
    assert!(c.resolve("fs_read").unwrap().notice("fs_read").is_none());
    assert!(c.resolve("nope").is_none());
}

#[test]
fn a_name_claimed_twice_is_an_error_or_namespaced() {
    let a = plugin("a-tools", vec![tool("same", LifecycleState::Active, "x", &[])]);
    let b = plugin("b-tools", vec![tool("same", LifecycleState::Active, "x", &[])]);
    let err = Catalog::build(vec![a.clone(), b.clone()], ConflictPolicy::Error).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`same`")
            && msg.contains("a-tools")
            && msg.contains("b-tools")
            && msg.contains("name_conflicts: namespace"),
        "{msg}"
    );
    let c = Catalog::build(vec![a, b], ConflictPolicy::Namespace).unwrap();
    let names: Vec<&str> = c.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a-tools.same", "b-tools.same"]);
}

#[test]
fn hidden_deprecated_and_removed_names_never_reach_a_surface_or_search() {
    let c = sample();
    let forbidden = ["read_file", "cat", "slurp", "delete_file", "fs_old_list"];
    for mode in [ExposureMode::Full, ExposureMode::Adaptive, ExposureMode::Hybrid, ExposureMode::Lazy] {
        let mut s = session(mode, &["*"]);
        // Even when a profile lists them as eager.
        s.policy.eager = forbidden.iter().map(|s| s.to_string()).collect();
        s.note_intent("read old list delete file cat slurp");
        let surface = s.surface(&c);
        let bytes = String::from_utf8(surface.to_bytes()).unwrap();
        for f in forbidden {
            assert!(!surface.contains(f), "{mode:?} shows {f}");
            assert!(!bytes.contains(&format!("\"{f}\"")), "{mode:?} bytes mention {f}");
        }
        assert!(!bytes.contains("deprecated"), "no deprecation notice in catalog bytes");
        if mode != ExposureMode::Full {
            assert_eq!(surface.ignored_eager.len(), forbidden.len());
        }
    }
    for q in ["read file", "cat", "slurp", "old list", "delete"] {
        let r =
            search_catalog(&c, &Access::unrestricted(), &SearchRequest { query: q.into(), ..Default::default() }, 50)
                .unwrap();
        for t in &r.tools {
            assert!(!forbidden.contains(&t.name.as_str()), "search for {q} returned {}", t.name);
        }
    }
    let r = search_catalog(
        &c,
        &Access::unrestricted(),
        &SearchRequest { query: "fs_.*".into(), mode: Some("regex".into()), ..Default::default() },
        50,
    )
    .unwrap();
    assert!(r.tools.iter().all(|t| !forbidden.contains(&t.name.as_str())));
    assert!(r.tools.iter().any(|t| t.name == "fs_read"));
}

#[test]
fn the_search_index_is_built_on_the_first_search_and_only_over_visible_tools() {
    let c = sample();
    let full = session(ExposureMode::Full, &["*"]).surface(&c);
    assert!(full.contains("fs_read"));
    assert!(!c.search_index_built(), "building the catalog and a surface without intent builds no index");
    let r =
        search_catalog(&c, &Access::unrestricted(), &SearchRequest { query: "read".into(), ..Default::default() }, 50)
            .unwrap();
    assert!(c.search_index_built(), "the first search builds it");
    assert_eq!(r.tools.first().map(|t| t.name.as_str()), Some("fs_read"));
    let (index, tools) = c.search_index();
    let visible: Vec<&str> = c.visible_tools().map(|t| t.name.as_str()).collect();
    assert_eq!(index.len(), visible.len());
    assert_eq!(tools.iter().map(|&i| c.tools()[i].name.as_str()).collect::<Vec<_>>(), visible);
    assert_eq!(index.docs().iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), visible);
}

#[test]
fn surfaces_per_mode() {
    let c = sample();
    let p = |mode| {
        partitions(&session(mode, &["*"]).surface(&c))
            .into_iter()
            .map(|(k, v)| format!("{k}: {}", v.join(" ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    expect_test::expect!["meta: tool_search"].assert_eq(&p(ExposureMode::Lazy));
    expect_test::expect![[r#"
        head: fs_edit fs_list fs_read time_now
        meta: tool_search list_tools run_tool"#]]
    .assert_eq(&p(ExposureMode::Hybrid));
    expect_test::expect![[r#"
        head: date_add date_diff fs_edit fs_list fs_read fs_search fs_secret time_now"#]]
    .assert_eq(&p(ExposureMode::Full));
}

/// An empty query lists tools by name (browsing, as `list_tools` does) but loads none of
/// them: a listing is no match (it loaded the first names alphabetically, `fs_edit` among them).
#[test]
fn an_empty_tool_search_query_lists_but_loads_nothing() {
    let c = sample();
    let mut s = session(ExposureMode::Lazy, &["*"]);
    s.next_turn();
    for query in ["", "   "] {
        let r = s.search(&c, &SearchRequest { query: query.into(), ..Default::default() }, true).unwrap();
        assert!(!r.tools.is_empty(), "an empty query still lists");
        assert!(r.loaded.is_empty(), "{query:?} loaded {:?}", r.loaded);
    }
    assert!(s.loaded().is_empty(), "{:?}", s.loaded());
}

#[test]
fn tool_search_loads_matches_and_the_session_survives_a_rescan() {
    let c = sample();
    let mut s = session(ExposureMode::Lazy, &["*"]);
    s.next_turn();
    let r = s.search(&c, &SearchRequest { query: "date diff".into(), ..Default::default() }, true).unwrap();
    assert_eq!(r.tools[0].name, "date_diff");
    assert!(r.loaded.contains(&"date_diff".to_owned()));
    assert_eq!(s.loaded()[0], ("date_diff".to_owned(), 1));
    assert_eq!(s.searches().len(), 1);
    let surface = s.surface(&c);
    assert_eq!(partitions(&surface)["loaded"][0], "date_diff");
    // Loaded tools come after the head and meta partitions: the earlier bytes are unchanged.
    let before = session(ExposureMode::Lazy, &["*"]).surface(&c).to_bytes();
    let after = surface.to_bytes();
    assert_eq!(&after[..before.len() - 1], &before[..before.len() - 1], "loading only appends");

    // A rebuilt catalog without time-tools drops the loaded tool with a warning.
    let fs_only: Vec<_> = c.plugins().iter().filter(|p| p.id() == "fs-tools").cloned().collect();
    let c2 = Catalog::build(fs_only, ConflictPolicy::Error).unwrap();
    let loaded_before = s.loaded().len();
    assert!(s.loaded().iter().all(|(n, _)| n.starts_with("date_") || n.starts_with("time_")), "{:?}", s.loaded());
    let w = s.reconcile(&c2);
    assert_eq!(w.len(), loaded_before, "one warning per dropped tool");
    assert!(w.iter().any(|x| x.contains("`date_diff`") && x.contains("no longer in the catalog")));
    assert!(s.loaded().is_empty());
    // A rebuilt catalog with the same tools keeps it.
    let mut s2 = session(ExposureMode::Lazy, &["*"]);
    s2.load(&c, &["fs_search".to_owned()]);
    let c3 = Catalog::build(c.plugins().to_vec(), ConflictPolicy::Error).unwrap();
    assert!(s2.reconcile(&c3).is_empty());
    assert_eq!(s2.loaded().len(), 1);
}

#[test]
fn a_snapshot_restores_the_loaded_set_within_the_resumed_sessions_scopes() {
    let c = sample();
    let mut s = session(ExposureMode::Hybrid, &["*"]);
    s.next_turn();
    s.load(&c, &["date_diff".to_owned(), "fs_secret".to_owned(), "fs_search".to_owned()]);
    s.unload(&["fs_search".to_owned()]);
    let snap = s.snapshot();
    assert_eq!(snap.loaded, ["date_diff", "fs_secret"]);
    assert_eq!(snap.dropped, ["fs_search"]);
    // Through JSON, as a store keeps it.
    let snap: crate::SessionSnapshot = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();

    let mut resumed = session(ExposureMode::Hybrid, &["*"]);
    assert_eq!(resumed.restore(&c, &snap), ["date_diff", "fs_secret"]);
    assert_eq!(resumed.turn(), 1);
    assert_eq!(resumed.surface(&c).to_bytes(), s.surface(&c).to_bytes(), "the same surface as before");

    // A profile without fs.admin does not get fs_secret back; a removed tool is not restored.
    let mut narrower = session(ExposureMode::Hybrid, &["fs.read"]);
    assert_eq!(narrower.restore(&c, &snap), ["date_diff"]);
    let fs_only: Vec<_> = c.plugins().iter().filter(|p| p.id() == "fs-tools").cloned().collect();
    let c2 = Catalog::build(fs_only, ConflictPolicy::Error).unwrap();
    let mut after_removal = session(ExposureMode::Hybrid, &["*"]);
    assert_eq!(after_removal.restore(&c2, &snap), ["fs_secret"]);
}

#[test]
fn surface_bytes_are_stable_across_rebuilds_and_shared_heads() {
    let c1 = sample();
    let c2 = sample();
    for mode in [ExposureMode::Full, ExposureMode::Adaptive, ExposureMode::Hybrid, ExposureMode::Lazy] {
        assert_eq!(session(mode, &["*"]).surface(&c1).to_bytes(), session(mode, &["*"]).surface(&c2).to_bytes());
    }
    // Modes with the same head serialize it byte-identically: adaptive and hybrid, and lazy
    // when its eager tools are the ones the others pin.
    let adaptive = session(ExposureMode::Adaptive, &["*"]).surface(&c1);
    let mut lazy = session(ExposureMode::Lazy, &["*"]);
    lazy.policy.eager = ["time_now", "fs_read", "fs_list", "fs_edit"].map(String::from).to_vec();
    let lazy = lazy.surface(&c1);
    let hybrid = session(ExposureMode::Hybrid, &["*"]).surface(&c1);
    let head = |s: &crate::Surface| {
        s.entries
            .iter()
            .filter(|e| e.partition == crate::Partition::Head)
            .map(|e| serde_json::to_string(&*e.descriptor).unwrap())
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(head(&lazy), head(&hybrid));
    assert_eq!(head(&adaptive), head(&hybrid));
    assert!(lazy.to_bytes().starts_with(format!("[{}", head(&lazy)).as_bytes()));
}

#[test]
fn caps_and_byte_budget_are_enforced() {
    let tools: Vec<ToolSpec> =
        (0..40).map(|i| tool(&format!("tool_{i:02}"), LifecycleState::Active, "many", &[])).collect();
    let c = Catalog::build(vec![plugin("many-tools", tools)], ConflictPolicy::Error).unwrap();
    let mut s = session(ExposureMode::Hybrid, &["*"]);
    let surface = s.surface(&c);
    // Active tools fill at most the head share of the cap; the rest is kept for loaded tools.
    assert_eq!(surface.n_typed, 16 * crate::session::HEAD_SHARE_PERCENT / 100);
    assert_eq!(surface.n_meta, 3);
    assert_eq!(surface.dropped.len(), 40 - surface.n_typed);
    let all: Vec<String> = (0..40).map(|i| format!("tool_{i:02}")).collect();
    s.load(&c, &all);
    let loaded = s.surface(&c);
    assert_eq!(loaded.n_typed, 16, "at most 16 typed schemas, whatever is loaded");
    assert_eq!(loaded.n_meta, 3);
    assert_eq!(
        &loaded.to_bytes()[..surface.to_bytes().len() - 1],
        &surface.to_bytes()[..surface.to_bytes().len() - 1],
        "the head is unchanged by loads"
    );
    // Eager tools may use the whole cap.
    let mut e = session(ExposureMode::Lazy, &["*"]);
    e.policy.eager = all.clone();
    assert_eq!(e.surface(&c).n_typed, 16);
    assert!(surface.typed_bytes <= SurfacePolicy::DEFAULT_BYTE_BUDGET);
    s.policy.byte_budget = 1000;
    let small = s.surface(&c);
    assert!(small.typed_bytes <= 1000, "{}", small.typed_bytes);
    assert!(small.n_typed >= 1 && small.n_typed < 16);
    let sum: usize = small.entries.iter().filter(|e| e.partition != crate::Partition::Meta).map(|e| e.bytes).sum();
    assert_eq!(sum, small.typed_bytes, "the reported bytes are the serialized bytes");
}

#[test]
fn scopes_hide_tools_from_surfaces_and_search() {
    let c = sample();
    let s = session(ExposureMode::Full, &["fs.read"]);
    let names = s.surface(&c).names().join(" ");
    assert!(!names.contains("fs_secret") && !names.contains("fs_edit"), "{names}");
    assert!(names.contains("fs_read") && names.contains("time_now"), "{names}");
    let r = search_catalog(&c, &s.access, &SearchRequest { query: "secret".into(), ..Default::default() }, 20).unwrap();
    assert!(r.tools.iter().all(|t| t.name != "fs_secret"));
    assert!(!c.domain_index(&s.access, 1000).contains("fs_secret"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the tools' scopes and the session's scopes, nothing the session lacks a scope
    /// for appears in any surface, search result or search index text.
    #[test]
    fn scope_filtering_never_leaks(
        tool_scopes in proptest::collection::vec(proptest::collection::vec(0usize..4, 0..3), 1..12),
        held in proptest::collection::vec(0usize..4, 0..4),
        query in "[a-z ]{0,12}",
    ) {
        let scope_names = ["a.read", "b.write", "c.admin", "d.net"];
        let tools: Vec<ToolSpec> = tool_scopes.iter().enumerate().map(|(i, sc)| {
            let names: Vec<&str> = sc.iter().map(|&k| scope_names[k]).collect();
            let state = if i % 2 == 0 { LifecycleState::Active } else { LifecycleState::Deferred };
            tool(&format!("tool_{i}_{}", names.join("_").replace('.', "_")), state, "d", &names)
        }).collect();
        let c = Catalog::build(vec![plugin("p", tools.clone())], ConflictPolicy::Error).unwrap();
        let held: Vec<&str> = held.iter().map(|&k| scope_names[k]).collect();
        let access = Access::new(held.iter().copied(), []);
        let allowed = |t: &ToolSpec| t.scopes.iter().all(|s| held.contains(&s.as_str()));
        for mode in [ExposureMode::Full, ExposureMode::Adaptive, ExposureMode::Hybrid, ExposureMode::Lazy] {
            let mut s = Session::new("p", SurfacePolicy { mode, ..SurfacePolicy::default() }, access.clone());
            s.note_intent(query.clone());
            let _ = s.search(&c, &SearchRequest { query: query.clone(), ..Default::default() }, true);
            let surface = s.surface(&c);
            let bytes = String::from_utf8(surface.to_bytes()).unwrap();
            for t in &tools {
                if !allowed(t) {
                    prop_assert!(!surface.contains(&t.name));
                    prop_assert!(!bytes.contains(&t.name), "{} leaked into {mode:?} bytes", t.name);
                }
            }
        }
        let r = search_catalog(&c, &access, &SearchRequest { query: query.clone(), limit: Some(50), ..Default::default() }, 50).unwrap();
        for e in &r.tools {
            let t = tools.iter().find(|t| t.name == e.name).unwrap();
            prop_assert!(allowed(t));
        }
        let visible = tools.iter().filter(|t| allowed(t)).count();
        if query.trim().is_empty() { prop_assert_eq!(r.total, visible); }
    }
}

#[test]
fn external_tool_lists_build_and_name_their_errors() {
    let tools = vec![
        serde_json::json!({"name": "a_tool", "description": "First", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}),
        serde_json::json!({"type": "function", "function": {"name": "b_tool", "description": "Second", "parameters": {"type": "object"}}}),
    ];
    let catalog = crate::catalog_from_tool_list("ext", tools.clone(), LifecycleState::Deferred).unwrap();
    assert_eq!(catalog.tools().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a_tool", "b_tool"]);
    let (d, n) = catalog.descriptor(0);
    assert_eq!(d["inputSchema"]["properties"]["x"]["type"], "string");
    assert_eq!(n, serde_json::to_vec(&**d).unwrap().len());
    let (index, _) = catalog.search_index();
    assert_eq!(index.len(), 2);

    let mut dup = tools;
    dup.push(serde_json::json!({"name": "a_tool"}));
    let err = crate::catalog_from_tool_list("ext", dup, LifecycleState::Deferred).unwrap_err();
    assert_eq!(err, "tools[2].name: `a_tool` is already the name of tools[0]; tool names must be unique");
    let err =
        crate::catalog_from_tool_list("ext", vec![serde_json::json!({"description": "x"})], LifecycleState::Deferred)
            .unwrap_err();
    assert_eq!(err, "tools[0].name: missing or not a string");
}

/// Lazy means nothing typed up front: only the profile's own `eager` tools and `tool_search`,
/// whatever else is installed (no tool is pinned by its manifest's `active` state).
#[test]
fn lazy_shows_only_the_eager_tools_and_tool_search_whatever_is_installed() {
    let c = sample();
    let s = session(ExposureMode::Lazy, &["*"]);
    assert_eq!(s.surface(&c).names(), ["tool_search"]);
    // An unrelated plugin full of active tools changes nothing.
    let extra = plugin("aaa-tools", vec![tool("aaa_first", LifecycleState::Active, "misc", &[])]);
    let mut plugins = c.plugins().to_vec();
    plugins.push(extra);
    let c2 = Catalog::build(plugins, ConflictPolicy::Error).unwrap();
    assert_eq!(s.surface(&c2).names(), ["tool_search"]);
    // The profile's eager tools are the whole typed head.
    let mut e = session(ExposureMode::Lazy, &["*"]);
    e.policy.eager = vec!["fs_search".into(), "time_now".into()];
    assert_eq!(e.surface(&c2).names(), ["fs_search", "time_now", "tool_search"]);
}

/// Adaptive (and hybrid) count calls as intent: a tool called by a name not on the surface
/// (through `run_tool` or a compatibility alias) becomes typed, in call order after the loaded
/// tools, under the caps; lazy sessions only grow by `tool_search`.
#[test]
fn calls_count_as_intent_in_adaptive_and_hybrid() {
    let c = sample();
    for mode in [ExposureMode::Adaptive, ExposureMode::Hybrid] {
        let mut s = session(mode, &["*"]);
        assert!(!s.surface(&c).contains("date_diff"));
        assert_eq!(s.note_call(&c, "date_diff"), Some("date_diff".to_owned()), "{mode:?}");
        let surface = s.surface(&c);
        assert!(surface.contains("date_diff"), "{mode:?}: {:?}", surface.names());
        assert_eq!(partitions(&surface)["called"], ["date_diff"]);
        // Deterministic: the same calls give the same bytes.
        let mut t = session(mode, &["*"]);
        t.note_call(&c, "date_diff");
        assert_eq!(t.surface(&c).to_bytes(), surface.to_bytes());
        // Calling it again adds nothing.
        assert_eq!(s.note_call(&c, "fs_search"), Some("fs_search".to_owned()));
        assert_eq!(s.note_call(&c, "fs_search"), None);
        assert_eq!(partitions(&s.surface(&c))["called"], ["date_diff", "fs_search"]);
        // A tool already on the surface, an unknown name or one outside the scopes adds nothing.
        assert_eq!(s.note_call(&c, "fs_read"), None);
        assert_eq!(s.note_call(&c, "cat"), None, "cat names fs_read, which is in the head");
        assert_eq!(s.note_call(&c, "nope"), None);
        let mut narrow = session(mode, &["fs.read"]);
        assert_eq!(narrow.note_call(&c, "fs_secret"), None);
        assert!(!narrow.surface(&c).contains("fs_secret"));
    }
    let mut lazy = session(ExposureMode::Lazy, &["*"]);
    assert_eq!(lazy.note_call(&c, "date_diff"), None);
    assert!(!lazy.surface(&c).contains("date_diff"));
}

/// A schema compiled on use is compiled once, at its first `get`, and validates like one
/// compiled at once; one that does not compile is refused by `PluginEntry::new` at load, and by
/// `get` (never panicking) when it was left for its first use.
#[test]
fn a_validator_compiled_on_use_compiles_once_at_its_first_use() {
    use crate::ToolValidator;
    let schema =
        Arc::new(json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}));
    let lazy = ToolValidator::on_use(schema.clone());
    assert!(!lazy.is_compiled());
    let v = lazy.get().unwrap();
    assert!(v.is_valid(&json!({"n": 2})) && !v.is_valid(&json!({"n": 0})) && !v.is_valid(&json!({})));
    assert!(lazy.is_compiled());
    assert!(std::ptr::eq(lazy.get().unwrap(), v), "compiled once");
    let now = ToolValidator::compile(schema).unwrap();
    assert!(now.is_compiled());

    let bad = Arc::new(json!({"type": "no such type"}));
    assert!(ToolValidator::compile(bad.clone()).is_err());
    let lazy_bad = ToolValidator::on_use(bad);
    let e = lazy_bad.get().unwrap_err();
    assert!(e.contains("no such type"), "{e}");
}

/// A first load (`PluginEntry::new`) compiles each schema it cannot show compiles, so a bad one
/// refuses the plugin there, by tool; a schema known to compile
/// (`Shape::known_to_compile`) is left to its first use, and then validates as compiled.
#[test]
fn a_first_load_compiles_at_once_only_the_schemas_not_known_to_compile() {
    let entry = |input: serde_json::Value| entry_with("p", vec![tool("t", LifecycleState::Active, "d", &[])], input);
    let shaped =
        entry(json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}))
            .expect("entry builds");
    let def = &shaped.tools[0];
    assert!(!def.input_validator.is_compiled(), "known to compile: compiled on first use");
    assert!(!def.output_validator.as_ref().unwrap().is_compiled());
    let v = def.input_validator.get().unwrap();
    assert!(v.is_valid(&json!({"n": 2})) && !v.is_valid(&json!({"n": 0})));

    for not_known in [
        json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$"}}}),
        // A shape, but a definition without one (never reached by a `$ref`).
        json!({"type": "object", "$defs": {"Unused": {"type": "string", "pattern": "^a+$"}}}),
    ] {
        let e = entry(not_known.clone()).expect("entry builds");
        assert!(e.tools[0].input_validator.is_compiled(), "not known to compile: compiled at the load: {not_known}");
    }

    for bad in [
        json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "("}}}),
        json!({"type": "object", "properties": {"s": {"type": "strng"}}}),
        json!({"type": "object", "properties": {"s": {"$ref": "#/$defs/Missing"}}}),
    ] {
        let e = entry(bad.clone()).err().unwrap_or_else(|| panic!("refused at the load: {bad}"));
        assert!(e.message.contains("tool `t`: input schema does not compile"), "{}", e.message);
    }
}

//! The catalog snapshot: every loaded tool and every name that reaches one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use quiver_manifest::{AliasSpec, LifecycleState};
use semver::Version;

use crate::search::{SearchDoc, SearchIndex, SearchSetup};
use crate::{PluginEntry, ToolDef};

/// What search knows of a tool: every field of its manifest entry plus its parameters.
fn search_doc(name: &str, def: &ToolDef) -> SearchDoc {
    let s = &def.spec;
    let mut doc = SearchDoc::from_input_schema(name, &s.description, &def.input_schema);
    doc.title = s.title.clone();
    doc.domain = s.domain.clone();
    doc.capabilities = s.capabilities.clone();
    doc.prompt_snippet = s.prompt_snippet.clone();
    doc.examples = s.examples.clone();
    doc.capabilities.extend(s.actions.iter().map(|a| format!("{} {}", a.name, a.description)));
    doc
}

/// A canonical tool in the catalog.
#[derive(Debug, Clone)]
pub struct ToolRef {
    /// The exposed canonical name (namespaced `plugin.tool` when the host config asks for it
    /// and two plugins claim the same name).
    pub name: String,
    /// Index of the plugin in [`Catalog::plugins`].
    pub plugin: usize,
    /// Index of the tool in the plugin's `tools`.
    pub tool: usize,
}

#[derive(Debug, Clone, Copy)]
enum NameTarget {
    Tool { tool: usize },
    Alias { tool: usize, alias: usize },
}

/// How two plugins claiming the same tool name are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConflictPolicy {
    /// Refuse to build the catalog (the loader keeps the last good state).
    #[default]
    Error,
    /// Expose both as `plugin-id.tool_name`.
    Namespace,
}

/// Why a catalog could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogError {
    /// Two plugins (or a tool and an alias) claim one name.
    NameConflict {
        /// The contested name.
        name: String,
        /// The plugins claiming it.
        plugins: Vec<String>,
    },
    /// Two loaded bundles have the same plugin id.
    DuplicatePlugin {
        /// The plugin id.
        id: String,
    },
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatalogError::NameConflict { name, plugins } => write!(
                f,
                "tool name `{name}` is claimed by more than one plugin ({}); rename one of them, or set `name_conflicts: namespace` in quiver.yaml to expose both as `plugin-id.{name}`",
                plugins.join(", ")
            ),
            CatalogError::DuplicatePlugin { id } => {
                write!(f, "two bundles declare plugin id `{id}`; remove one of them from the plugins folder")
            }
        }
    }
}

impl std::error::Error for CatalogError {}

/// A deprecation or compatibility note about the name a call used.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Notice {
    /// The name the caller used.
    pub name: String,
    /// Its state.
    pub state: LifecycleState,
    /// The canonical tool to call instead.
    pub replacement: Option<String>,
    /// The action to pass to the replacement, for aliases of consolidated tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// First version that deprecated the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_deprecated_version: Option<Version>,
    /// Version planned to remove the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_removal_version: Option<Version>,
    /// Version that removed the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_in_version: Option<Version>,
    /// Whether old transcripts using the name still replay.
    pub replay_supported: bool,
}

impl Notice {
    /// The sentence a model reads.
    pub fn message(&self) -> String {
        let instead = match (&self.replacement, &self.action) {
            (Some(r), Some(a)) => format!("call `{r}` with action `{a}` instead"),
            (Some(r), None) => format!("call `{r}` instead"),
            (None, _) => "see `tool_search` for a replacement".to_owned(),
        };
        match self.state {
            LifecycleState::Removed => format!(
                "tool `{}` was removed{}; {instead}",
                self.name,
                self.removed_in_version.as_ref().map(|v| format!(" in version {v}")).unwrap_or_default()
            ),
            LifecycleState::Deprecated => format!(
                "tool `{}` is deprecated{}{}; {instead}",
                self.name,
                self.first_deprecated_version.as_ref().map(|v| format!(" since {v}")).unwrap_or_default(),
                self.planned_removal_version
                    .as_ref()
                    .map(|v| format!(" and will be removed in {v}"))
                    .unwrap_or_default()
            ),
            _ => format!("tool `{}` is a compatibility name; {instead}", self.name),
        }
    }
}

/// A name resolved to the tool it reaches.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'a> {
    /// The canonical tool.
    pub tool: &'a ToolRef,
    /// Its plugin.
    pub plugin: &'a Arc<PluginEntry>,
    /// Its definition (schemas, policies).
    pub def: &'a ToolDef,
    /// State of the name as called (an alias has its own state).
    pub state: LifecycleState,
    /// The action an alias fills in.
    pub action: Option<&'a str>,
    /// The alias used, if any.
    pub alias: Option<&'a AliasSpec>,
}

impl Resolved<'_> {
    /// True when the name was the canonical one.
    pub fn is_canonical(&self) -> bool {
        self.alias.is_none()
    }

    /// The notice to attach for a non-canonical or deprecated name, if any.
    pub fn notice(&self, called: &str) -> Option<Notice> {
        match self.alias {
            Some(a) => Some(Notice {
                name: called.to_owned(),
                state: a.state,
                replacement: Some(self.tool.name.clone()),
                action: a.action.clone(),
                first_deprecated_version: a.first_deprecated_version.clone(),
                planned_removal_version: a.planned_removal_version.clone(),
                removed_in_version: a.removed_in_version.clone(),
                replay_supported: a.replay_supported,
            }),
            None => {
                let l = &self.def.spec.lifecycle;
                (!l.state.is_visible()).then(|| Notice {
                    name: called.to_owned(),
                    state: l.state,
                    replacement: l.replacement.clone(),
                    action: None,
                    first_deprecated_version: l.first_deprecated_version.clone(),
                    planned_removal_version: l.planned_removal_version.clone(),
                    removed_in_version: l.removed_in_version.clone(),
                    replay_supported: l.replay_supported,
                })
            }
        }
    }
}

/// One immutable snapshot of every loaded tool. Rebuilt (cheaply: schemas stay compiled in
/// their [`PluginEntry`]) whenever the set of plugins changes, and swapped in whole.
pub struct Catalog {
    plugins: Vec<Arc<PluginEntry>>,
    tools: Vec<ToolRef>,
    /// Every callable name (canonical and alias). foldhash, not SipHash: looked up on every
    /// call, and several times faster on short names (seeded per map).
    names: HashMap<String, NameTarget, foldhash::fast::RandomState>,
    warnings: Vec<String>,
    /// Descriptor and its serialized size, parallel to `tools`; each built on first use (a
    /// deferred tool that is never surfaced never pays for one).
    descriptors: Vec<OnceLock<(Arc<serde_json::Value>, usize)>>,
    /// Search index over visible tools; document `i` is tool `search_tools[i]`. Built on the
    /// first search that needs it (most starts and rebuilds never search before the next
    /// rebuild), from `search_setup`.
    search: OnceLock<SearchIndex>,
    search_setup: SearchSetup,
    search_tools: Vec<usize>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("plugins", &self.plugins)
            .field("n_tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// An empty catalog.
    pub fn empty() -> Catalog {
        Catalog {
            plugins: Vec::new(),
            tools: Vec::new(),
            names: HashMap::default(),
            warnings: Vec::new(),
            descriptors: Vec::new(),
            search: OnceLock::new(),
            search_setup: SearchSetup::default(),
            search_tools: Vec::new(),
        }
    }

    /// Builds a snapshot from loaded plugins. Fails on a name claimed twice (unless `policy`
    /// namespaces it) or on a duplicate plugin id; never half-builds. Search ranks lexically;
    /// [`Catalog::build_with`] takes the search settings.
    pub fn build(plugins: Vec<Arc<PluginEntry>>, policy: ConflictPolicy) -> Result<Catalog, CatalogError> {
        Self::build_with(plugins, policy, &SearchSetup::default())
    }

    /// [`Catalog::build`] with search settings (`search:` of quiver.yaml: an embedding model).
    pub fn build_with(
        plugins: Vec<Arc<PluginEntry>>,
        policy: ConflictPolicy,
        search: &SearchSetup,
    ) -> Result<Catalog, CatalogError> {
        let mut plugins = plugins;
        plugins.sort_by(|a, b| a.id().cmp(b.id()));
        for w in plugins.windows(2) {
            if w[0].id() == w[1].id() {
                return Err(CatalogError::DuplicatePlugin { id: w[0].id().to_owned() });
            }
        }
        // Who claims each name (tool names and alias names alike).
        let mut claims: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (pi, p) in plugins.iter().enumerate() {
            for t in &p.tools {
                claims.entry(t.spec.name.as_str()).or_default().push(pi);
                for a in &t.spec.aliases {
                    claims.entry(a.name.as_str()).or_default().push(pi);
                }
            }
        }
        let contested: Vec<(&str, Vec<usize>)> = claims.into_iter().filter(|(_, v)| v.len() > 1).collect();
        if let Some((name, owners)) = contested.first()
            && (policy == ConflictPolicy::Error || owners.windows(2).any(|w| w[0] == w[1]))
        {
            return Err(CatalogError::NameConflict {
                name: (*name).to_owned(),
                plugins: owners.iter().map(|&i| plugins[i].id().to_owned()).collect(),
            });
        }
        let contested_names: std::collections::HashSet<&str> = contested.iter().map(|(c, _)| *c).collect();
        let is_contested = |n: &str| contested_names.contains(n);
        let exposed = |pi: usize, n: &str| {
            if is_contested(n) { format!("{}.{n}", plugins[pi].id()) } else { n.to_owned() }
        };

        let mut tools = Vec::new();
        for (pi, p) in plugins.iter().enumerate() {
            for (ti, t) in p.tools.iter().enumerate() {
                tools.push(ToolRef { name: exposed(pi, &t.spec.name), plugin: pi, tool: ti });
            }
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let mut names = HashMap::with_capacity_and_hasher(tools.len(), foldhash::fast::RandomState::default());
        for (i, r) in tools.iter().enumerate() {
            names.insert(r.name.clone(), NameTarget::Tool { tool: i });
            let def = &plugins[r.plugin].tools[r.tool];
            for (ai, a) in def.spec.aliases.iter().enumerate() {
                names.insert(exposed(r.plugin, &a.name), NameTarget::Alias { tool: i, alias: ai });
            }
        }
        let mut catalog = Catalog { plugins, tools, names, ..Catalog::empty() };
        catalog.warnings = catalog.check_replacements();
        catalog.descriptors = (0..catalog.tools.len()).map(|_| OnceLock::new()).collect();
        catalog.search_tools = (0..catalog.tools.len())
            .filter(|&i| catalog.def(&catalog.tools[i]).spec.lifecycle.state.is_visible())
            .collect();
        catalog.search_setup = search.clone();
        Ok(catalog)
    }

    /// Deprecated or removed tools must point at a tool that exists and is visible.
    fn check_replacements(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.tools {
            let l = &self.def(r).spec.lifecycle;
            if let Some(rep) = &l.replacement {
                match self.names.get(rep.as_str()) {
                    Some(NameTarget::Tool { tool })
                        if self.def(&self.tools[*tool]).spec.lifecycle.state.is_visible() => {}
                    _ => out.push(format!(
                        "tool `{}` names replacement `{rep}`, which is not a visible tool in this catalog",
                        r.name
                    )),
                }
            }
        }
        out
    }

    /// Loaded plugins, sorted by id.
    pub fn plugins(&self) -> &[Arc<PluginEntry>] {
        &self.plugins
    }

    /// Canonical tools, sorted by exposed name (every state, removed included).
    pub fn tools(&self) -> &[ToolRef] {
        &self.tools
    }

    /// The definition behind a tool reference.
    pub fn def(&self, r: &ToolRef) -> &ToolDef {
        &self.plugins[r.plugin].tools[r.tool]
    }

    /// The plugin behind a tool reference.
    pub fn plugin_of(&self, r: &ToolRef) -> &Arc<PluginEntry> {
        &self.plugins[r.plugin]
    }

    /// Problems that did not stop the build (e.g. a replacement that is not loaded).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Resolves any name (canonical, alias, removed) to its tool. Visibility and scopes are the
    /// caller's business: resolution knows nothing of sessions.
    pub fn resolve(&self, name: &str) -> Option<Resolved<'_>> {
        let target = *self.names.get(name)?;
        Some(match target {
            NameTarget::Tool { tool } => {
                let r = &self.tools[tool];
                let def = self.def(r);
                Resolved {
                    tool: r,
                    plugin: &self.plugins[r.plugin],
                    def,
                    state: def.spec.lifecycle.state,
                    action: None,
                    alias: None,
                }
            }
            NameTarget::Alias { tool, alias } => {
                let r = &self.tools[tool];
                let def = self.def(r);
                let a = &def.spec.aliases[alias];
                Resolved {
                    tool: r,
                    plugin: &self.plugins[r.plugin],
                    def,
                    state: a.state,
                    action: a.action.as_deref(),
                    alias: Some(a),
                }
            }
        })
    }

    /// Every name in the catalog, sorted (canonical names and aliases).
    pub fn all_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.names.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// The precomputed descriptor of a tool (index into [`Catalog::tools`]) and its size.
    pub fn descriptor(&self, tool: usize) -> (&Arc<serde_json::Value>, usize) {
        let (d, n) = self.descriptors[tool].get_or_init(|| {
            let d = crate::surface::descriptor(self, &self.tools[tool]);
            let n = serde_json::to_vec(&d).map(|v| v.len()).unwrap_or(0);
            (Arc::new(d), n)
        });
        (d, *n)
    }

    /// Index of a canonical tool by exposed name.
    pub fn tool_index(&self, name: &str) -> Option<usize> {
        self.tools.binary_search_by(|r| r.name.as_str().cmp(name)).ok()
    }

    /// The search index over visible tools, and the tool index of each of its documents.
    pub fn search_index(&self) -> (&SearchIndex, &[usize]) {
        let index = self.search.get_or_init(|| {
            let docs = self.search_tools.iter().map(|&i| search_doc(&self.tools[i].name, self.def(&self.tools[i])));
            self.search_setup.index(docs.collect())
        });
        (index, &self.search_tools)
    }

    /// True once the search index has been built (by the first search that needed it).
    pub fn search_index_built(&self) -> bool {
        self.search.get().is_some()
    }

    /// A compact, deterministic index of what the caller can find: domains with tool counts
    /// and a few names per domain, at most `budget` bytes.
    pub fn domain_index(&self, access: &crate::Access, budget: usize) -> String {
        let mut domains: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in self.visible_tools() {
            let def = self.def(r);
            if access.may_see(&r.name, def) {
                let d = if def.spec.domain.is_empty() { "general" } else { def.spec.domain.as_str() };
                domains.entry(d).or_default().push(r.name.as_str());
            }
        }
        if domains.is_empty() {
            return String::new();
        }
        let mut out = String::from("Catalog:");
        for (d, names) in &domains {
            let shown: Vec<&str> = names.iter().take(3).copied().collect();
            let more = if names.len() > shown.len() { ", ..." } else { "" };
            let part = format!(" {d} ({}: {}{more});", names.len(), shown.join(", "));
            if out.len() + part.len() > budget {
                out.push_str(" ...");
                break;
            }
            out.push_str(&part);
        }
        out
    }

    /// Tools whose canonical name is visible (active or deferred), sorted by name.
    pub fn visible_tools(&self) -> impl Iterator<Item = &ToolRef> {
        self.tools.iter().filter(|r| self.def(r).spec.lifecycle.state.is_visible())
    }
}

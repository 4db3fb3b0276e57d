//! What every session of one server shares.

use std::sync::Arc;

use quiver_catalog::{Access, Catalog, CatalogSource, SurfacePolicy};
use quiver_manifest::{HostConfig, Profile};
use quiver_router::{Approval, Caller, Router};
use tokio::sync::watch;

use crate::connection::Connection;
use crate::listing::ToolCache;

/// How a session sees the catalog: its profile's surface policy, scopes and approval rule.
#[derive(Debug, Clone)]
pub struct SessionProfile {
    /// Profile name (`agent`, `plan`, ...); reported to the router as the session's mode.
    pub name: String,
    /// Exposure mode, eager core and caps.
    pub policy: SurfacePolicy,
    /// Scopes and gates.
    pub access: Access,
    /// What to do with calls that need a person's confirmation.
    pub approval: Approval,
    /// Whether a result with structured content also carries it as JSON text (profile
    /// `structured_text`; true unless the operator knows the clients read `structuredContent`).
    pub structured_text: bool,
}

impl SessionProfile {
    /// A profile with every scope, the given surface policy, and approval `Ask`.
    pub fn unrestricted(name: impl Into<String>, policy: SurfacePolicy) -> SessionProfile {
        SessionProfile {
            name: name.into(),
            policy,
            access: Access::unrestricted(),
            approval: Approval::Ask,
            structured_text: true,
        }
    }

    /// The session profile of a `quiver.yaml` profile: the one mapping from a configured
    /// profile to session settings, used by `quiver serve` (every MCP session), `quiver call`,
    /// `quiver replay` and `quiver surface`.
    pub fn from_config(name: &str, p: &Profile) -> SessionProfile {
        SessionProfile {
            name: name.to_owned(),
            policy: SurfacePolicy::from(p),
            access: Access::new(&p.scopes, &p.gated),
            approval: Approval::from(p.approval),
            structured_text: p.structured_text,
        }
    }

    /// The caller of a session of this profile (`principal`: the authenticated one, if any).
    pub fn caller(
        &self,
        session_id: impl Into<String>,
        client: impl Into<String>,
        principal: Option<String>,
    ) -> Caller {
        let mut caller = Caller::new(session_id, self.access.clone()).with_approval(self.approval);
        caller.client = client.into();
        caller.mode = self.name.clone();
        caller.principal = principal;
        caller.searches = self.policy.mode.meta_tools().contains(&quiver_catalog::TOOL_SEARCH);
        caller
    }

    /// How a configuration picks profiles: `forced` (the operator's `--profile`) for every
    /// session when given; else, for an authenticated principal, its credential's `profile`,
    /// then `server.auth.principals`, then the default profile (the client's self-declared name
    /// is ignored: it is not a security boundary); else, only where the client name may serve
    /// as a hint (stdio, loopback HTTP without auth), the first profile whose `clients` glob
    /// matches it ([`HostConfig::profile_for`]); else the default profile.
    pub fn resolver(config: &HostConfig, forced: Option<String>) -> Profiles {
        let config = config.clone();
        Arc::new(move |who: &SessionIdentity<'_>| {
            let requested = forced.clone().or_else(|| {
                who.principal.and_then(|p| {
                    p.profile
                        .clone()
                        .or_else(|| config.server.auth.as_ref().and_then(|a| a.principals.get(&p.name).cloned()))
                })
            });
            let hint = if who.principal.is_none() && who.client_hint { who.client_name } else { "" };
            let (name, profile) = config.profile_for(hint, requested.as_deref());
            SessionProfile::from_config(name, profile)
        })
    }
}

/// Who opened a session, for picking its profile.
#[derive(Debug, Clone, Copy)]
pub struct SessionIdentity<'a> {
    /// The name the client announced (`clientInfo.name`): self-declared, so only a hint.
    pub client_name: &'a str,
    /// The authenticated principal (HTTP with `server.auth`).
    pub principal: Option<&'a crate::Principal>,
    /// True when the client name may pick the profile (stdio; loopback HTTP without auth).
    pub client_hint: bool,
}

/// Picks a session's profile from who opened it.
pub type Profiles = Arc<dyn Fn(&SessionIdentity<'_>) -> SessionProfile + Send + Sync>;

/// Server-wide limits and identity.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Largest incoming message in bytes (stdio line or HTTP body); larger ones are refused
    /// with a JSON-RPC error (`server.max_message_bytes` in `quiver.yaml`).
    pub max_message_bytes: usize,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Server name announced in `initialize`.
    pub name: String,
    /// Server version announced in `initialize`.
    pub version: String,
    /// Instructions announced in `initialize`.
    pub instructions: Option<String>,
    /// Where sessions are kept so they can resume; `None`: nowhere (a session ends with its
    /// connection). HTTP sessions are stored under their `Mcp-Session-Id`, stdio sessions only
    /// when they have a key ([`ServerOptions::resume_key`] or `_meta`).
    pub session_store: Option<Arc<crate::SessionStore>>,
    /// The key of the stdio session to resume or start (`quiver serve --resume KEY`); a key in
    /// `initialize`'s `_meta` ([`crate::SESSION_META_KEY`]) wins.
    pub resume_key: Option<String>,
}

impl ServerOptions {
    /// The options a configuration asks for (`server.max_message_bytes`; `plugin_config` is the
    /// router's, see `quiver_router::RouterSettings`).
    pub fn from_config(config: &HostConfig) -> ServerOptions {
        ServerOptions {
            max_message_bytes: usize::try_from(config.server.max_message_bytes).unwrap_or(usize::MAX),
            ..ServerOptions::default()
        }
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_message_bytes: 4 * 1024 * 1024,
            page_size: 100,
            name: "quiver".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instructions: Some(
                "Quiver serves signed tool plugins. If no listed tool fits the task, call tool_search \
                 with what you want to do: it loads the best matches into your tool list. When a tool \
                 you need is not in your list, list_tools and run_tool (when offered) reach every tool."
                    .to_owned(),
            ),
            session_store: None,
            resume_key: None,
        }
    }
}

pub(crate) struct Shared {
    pub(crate) source: Arc<dyn CatalogSource>,
    pub(crate) router: Arc<Router>,
    pub(crate) profiles: Profiles,
    pub(crate) changes: watch::Receiver<Arc<Catalog>>,
    pub(crate) options: ServerOptions,
    pub(crate) tools: ToolCache,
    /// Live sessions, for the operator dashboard (dead entries are pruned when listed).
    pub(crate) sessions: std::sync::Mutex<Vec<std::sync::Weak<crate::connection::Live>>>,
    /// HTTP sessions by `Mcp-Session-Id`, for the calls the transport serves in place.
    pub(crate) in_place: crate::http_sessions::InPlaceSessions,
}

impl Shared {
    pub(crate) fn register_session(&self, live: std::sync::Weak<crate::connection::Live>) {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(live);
    }

    /// The sessions still open.
    pub(crate) fn live_sessions(&self) -> Vec<Arc<crate::connection::Live>> {
        let mut all = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.iter().filter_map(std::sync::Weak::upgrade).collect()
    }
}

/// The MCP server: what all its sessions share. Cheap to clone; [`QuiverServer::connection`]
/// makes the handler of one session.
#[derive(Clone)]
pub struct QuiverServer {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for QuiverServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuiverServer").field("options", &self.shared.options).finish_non_exhaustive()
    }
}

impl QuiverServer {
    /// A server over `source` (the current catalog, read on every request), calling tools
    /// through `router`. `profiles` picks each session's profile from its client name;
    /// `changes` announces every new catalog snapshot (the CLI feeds it from the lifecycle
    /// host's `on_change`).
    pub fn new(
        source: Arc<dyn CatalogSource>,
        router: Arc<Router>,
        profiles: Profiles,
        changes: watch::Receiver<Arc<Catalog>>,
    ) -> QuiverServer {
        QuiverServer::with_options(source, router, profiles, changes, ServerOptions::default())
    }

    /// [`QuiverServer::new`] with options.
    pub fn with_options(
        source: Arc<dyn CatalogSource>,
        router: Arc<Router>,
        profiles: Profiles,
        changes: watch::Receiver<Arc<Catalog>>,
        options: ServerOptions,
    ) -> QuiverServer {
        QuiverServer {
            shared: Arc::new(Shared {
                source,
                router,
                profiles,
                changes,
                options,
                tools: ToolCache::default(),
                sessions: Default::default(),
                in_place: Default::default(),
            }),
        }
    }

    /// The options in force.
    pub fn options(&self) -> &ServerOptions {
        &self.shared.options
    }

    /// The handler of a new session (one stdio connection, one HTTP session).
    pub fn connection(&self) -> Connection {
        Connection::new(self.shared.clone())
    }
}

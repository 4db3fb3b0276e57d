//! Who may see and call what: scopes and per-profile gates. The one place visibility is decided,
//! so listing, search, dispatch and error messages cannot disagree.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ToolDef;

/// What a session is allowed: the scopes it holds and the tool names its profile gates off.
/// Never changed once made, so a clone (one per call) shares the sets instead of copying them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    all_scopes: bool,
    scopes: Arc<BTreeSet<String>>,
    gated: Arc<BTreeSet<String>>,
}

impl Access {
    /// Access with the given scopes (`"*"` grants every scope) and gated tool names.
    pub fn new<S: AsRef<str>>(scopes: impl IntoIterator<Item = S>, gated: impl IntoIterator<Item = S>) -> Access {
        let mut all_scopes = false;
        let mut set = BTreeSet::new();
        for s in scopes {
            let s = s.as_ref();
            if s == "*" {
                all_scopes = true;
            } else {
                set.insert(s.to_owned());
            }
        }
        Access {
            all_scopes,
            scopes: Arc::new(set),
            gated: Arc::new(gated.into_iter().map(|g| g.as_ref().to_owned()).collect()),
        }
    }

    /// Every scope, nothing gated (CLI use by the machine's owner).
    pub fn unrestricted() -> Access {
        Access { all_scopes: true, ..Access::default() }
    }

    /// True when the session holds `scope`.
    pub fn holds(&self, scope: &str) -> bool {
        self.all_scopes || self.scopes.contains(scope)
    }

    /// True when the session may know that the tool exists: it holds every scope the tool
    /// requires and the profile gates none of the tool's names. Action scopes are checked at
    /// call time ([`Access::may_call`]).
    pub fn may_see(&self, canonical_name: &str, def: &ToolDef) -> bool {
        !self.gates(canonical_name, def) && def.spec.scopes.iter().all(|s| self.holds(s))
    }

    /// True when the profile gates the tool: by its exposed name, its manifest name, or any of
    /// its aliases (an alias, of an action too, gates the whole tool it reaches, so a gated
    /// name can never be called through another).
    fn gates(&self, canonical_name: &str, def: &ToolDef) -> bool {
        !self.gated.is_empty()
            && (self.gated.contains(canonical_name)
                || self.gated.contains(&def.spec.name)
                || def.spec.aliases.iter().any(|a| self.gated.contains(&a.name)))
    }

    /// True when the session may run the tool with the given action.
    pub fn may_call(&self, canonical_name: &str, def: &ToolDef, action: Option<&str>) -> bool {
        self.may_see(canonical_name, def) && def.scopes_for(action).all(|s| self.holds(s))
    }

    /// True when `other` holds the very same scopes as this (the same shared set, not only
    /// equal ones): a cheap check that something written from these scopes still holds.
    pub fn same_scopes_as(&self, other: &Access) -> bool {
        self.all_scopes == other.all_scopes && Arc::ptr_eq(&self.scopes, &other.scopes)
    }

    /// The scopes held, as [`Access::scopes`] lists them (`*` first when every scope is
    /// granted), without copying: the request's agent context is written from it.
    pub fn scope_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.all_scopes.then_some("*").into_iter().chain(self.scopes.iter().map(String::as_str))
    }

    /// The scopes held (without `*`), for telemetry and the request's agent context.
    pub fn scopes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.scopes.iter().cloned().collect();
        if self.all_scopes {
            v.insert(0, "*".to_owned());
        }
        v
    }
}

/// Anything that can hand out the current catalog snapshot (the lifecycle host, a test fixture).
pub trait CatalogSource: Send + Sync {
    /// The current snapshot.
    fn catalog(&self) -> std::sync::Arc<crate::Catalog>;
}

impl CatalogSource for std::sync::Arc<crate::Catalog> {
    fn catalog(&self) -> std::sync::Arc<crate::Catalog> {
        self.clone()
    }
}

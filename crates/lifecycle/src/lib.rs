//! Plugin lifecycle: finds signed bundles in the plugins folder, verifies them, loads them and
//! hot-swaps them without a restart.
//!
//! The order of checks is the security contract of Quiver (see `docs/ARCHITECTURE.md` and
//! `docs/SECURITY.md`): every file is a regular file read through the handle that was checked,
//! size-capped, not writable by others (refused under `strict`) → signature over the manifest
//! bytes by a trusted, unrevoked key → manifest validation → the key may sign this plugin id and
//! the signature's trusted comment names this id, version and library sha256 → library is a
//! regular file of bounded size beside the manifest → its sha256 equals the signed one and is not
//! revoked → not below the persistent rollback record ([`RollbackStore`]) nor the loaded version
//! → the very bytes that were hashed are written to a new private path → only then is that copy
//! opened → ABI check → the library's embedded manifest must equal the signed one.
//! [`verify_bundle`] runs the checks that need no plugin code; [`load_verified`] the rest.
//!
//! Declarative adapter bundles (a signed manifest with `adapter:`, no library) take the same
//! path up to the manifest; the signature's trusted comment binds the manifest's own sha256, and
//! [`adapter::Adapter`] runs their tools (a command or an HTTP request) in the host or in a
//! sandboxed worker.
//!
//! Principal types: [`Host`] (scan state, last good state per bundle, lock-free catalog
//! snapshots), [`VerifiedBundle`], [`BundleError`] with its failed [`Stage`].
//!
//! What this crate does not do: decide what a session sees (`quiver-catalog`), run the call
//! pipeline (`quiver-router`), or unload libraries (never: a swapped-out library stays mapped so
//! in-flight calls finish on it).

pub mod adapter;
mod bundle;
mod deferred;
mod host;
mod host_services;
mod isolation;
mod library;
pub mod record;
mod rollback;
mod source;
pub mod worker;

pub use bundle::{
    BundleError, MAX_MANIFEST_BYTES, SecretStatus, SecretStatusMap, Stage, VerifiedBundle, VerifyPolicy, load_verified,
    signature_path, verify_bundle,
};
pub use host::{Host, HostSettings, RescanSignal, Rescanner, ScanReport};
pub use host_services::InProcessBackend;
pub use isolation::IsolationPolicy;
pub use library::VerifiedLibrary;
pub use rollback::{Accepted, ROLLBACK_FILE, ROLLBACK_LOG, RollbackStore};
pub use source::{BundleSource, NameClaims, ToolSource, check_in_worker, describe_in_worker, sandbox_rules};

/// Makes rustls' `ring` provider the process default, once. The HTTP clients (HTTP adapters
/// here, upstream MCP servers in `quiver-upstream`) share one reqwest build whose TLS has no
/// built-in provider (`rustls-no-provider`: no aws-lc C build); building a client without a
/// default provider would panic. A provider installed earlier by anyone stays.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

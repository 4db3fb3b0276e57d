//! `quiver-manifest`: what a plugin bundle and the host configuration say, and whether to believe
//! them. The bottom of the host side.
//!
//! - **Manifest model** ([`Manifest`], [`ToolSpec`], [`AliasSpec`], [`ActionSpec`], lifecycle and
//!   policy types): the typed `tool.yaml`.
//! - **Validation**: [`Manifest::from_yaml`] reads untrusted YAML (size cap, no anchors or
//!   aliases), checks it against the embedded JSON Schema `schemas/tool-manifest.schema.json`,
//!   deserializes it, then applies the rules a schema cannot express (unique tool and alias
//!   names, lifecycle, action enums, argument schemas that compile). Failures are a
//!   [`ManifestError`] listing every [`Issue`] with its field path and a fix.
//! - **Host configuration**: [`HostConfig::from_yaml`] reads `quiver.yaml` the same way, against
//!   `schemas/quiver-config.schema.json`; [`HostConfig::profile_for`] picks a session's
//!   [`Profile`].
//! - **Signatures**: minisign-format keys and signatures ([`PublicKey`], [`TrustedKeys`],
//!   [`verify`], [`KeyPair`], [`sign`]), interoperable with the `minisign` tool.
//! - **Adapters** ([`AdapterSpec`], [`InvokeSpec`], [`Template`]): a bundle whose tools run a
//!   command or make an HTTP request, described entirely in its signed manifest.
//! - **Checksums**: [`sha256_hex`] of library bytes, as written in `artifact.sha256` ([`Sha256Stream`]
//!   for bytes hashed piece by piece).
//! - **Secret sources**: [`SecretRef`] (`{ env: NAME }` or `{ file: PATH }`) and its
//!   [`SecretRef::resolve`], the crate's one I/O function, run only when a caller asks.
//!
//! What it does not do: load plugins, run plugin code, scan or watch folders, read key files or
//! resolve paths. Its parsing core does no I/O at all; callers read files and pass text or bytes
//! (**Architecture Invariant**: `manifest` does no I/O; the one exception is
//! [`SecretRef::resolve`], which callers invoke explicitly).

#![warn(missing_docs)]

mod adapter;
mod artifact;
mod checksum;
mod config;
mod error;
mod model;
mod schema;
mod secret;
mod signature;
mod sources;
mod validate;
mod yaml;

pub use adapter::{
    AdapterSpec, CommandAdapter, HttpAdapter, HttpMethod, InvokeSpec, OutputFormat, Payload, Piece, Template,
    check_base_url, code_with_placeholder, value_text,
};
pub use artifact::{ARTIFACT_MARKER, pin_artifact, signed_as_pinned, with_artifact_text};
pub use checksum::{Sha256Stream, sha256_hex};
pub use config::{
    ApprovalMode, AuthConfig, BearerToken, CONFIG_VERSION, ExposureMode, HostConfig, Isolation, IsolationConfig,
    JwtConfig, KeySource, LogFormatConfig, NameConflicts, OtlpConfig, Profile, Revocations, RouterConfig,
    SearchSettings, ServerConfig, SessionsConfig, TelemetryConfig, TranscriptConfig, WorkerConfig, glob_matches,
};
pub use error::{Issue, ManifestError};
pub use model::{
    ActionSpec, AliasSpec, Artifact, Execution, LifecycleSpec, LifecycleState, MANIFEST_VERSION, Manifest, PathAccess,
    PathDefault, PathGrant, Policies, PolicySpec, RateLimit, RateLimits, ReportFile, SandboxSpec, SessionHooks,
    SideEffects, ToolSpec,
};
pub use schema::{QUIVER_CONFIG_SCHEMA, TOOL_MANIFEST_SCHEMA, edit_distance};
pub use secret::{MAX_SECRET_FILE_BYTES, Secret, SecretError, SecretRef};
pub use signature::{
    BUNDLE_COMMENT_PREFIX, KeyError, KeyPair, PublicKey, SignatureError, TrustedKey, TrustedKeys, Verified,
    bundle_comment, check_bundle_comment, sign, sign_bundle, verify,
};
pub use sources::{ToolOverride, UpstreamConfig, ValueSource};
pub use validate::{MAX_NAME_LEN, RESERVED_TOOL_NAMES, SUPPORTED_ABI, is_reserved_tool_name};
pub use yaml::{MAX_YAML_BYTES, MAX_YAML_DEPTH};

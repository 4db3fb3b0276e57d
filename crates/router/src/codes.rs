//! Error codes the router adds to [`quiver_abi::ErrorCode`]'s, and the confirmation convention.

/// The tool's circuit breaker is open after repeated failures; retryable after
/// `details.retry_after_ms`.
pub const CIRCUIT_OPEN: &str = "circuit_open";
/// The tool needs a person's confirmation and none could be obtained in this call.
pub const CONFIRMATION_REQUIRED: &str = "confirmation_required";
/// The name was removed; the message names the replacement and the removing version.
pub const TOOL_REMOVED: &str = "tool_removed";
/// A rate limit (per tool, session or principal) refused the call; retryable after
/// `details.retry_after_ms`.
pub const RATE_LIMITED: &str = "rate_limited";
/// The tool's result does not match its output schema (a fault of the tool).
pub const INVALID_OUTPUT: &str = "invalid_output";

/// The request `_meta` key through which an MCP client marks a call as confirmed by a person
/// (the MCP layer sets [`crate::Call::confirmed`] from it).
pub const CONFIRM_META_KEY: &str = "io.github.quiver/confirmed";

//! Error codes: [`Code`], the typed kinds of every error the host itself makes
//! ([`quiver_abi::ErrorCode`]'s and the router's own), shared by the router and the MCP layer so
//! that no crate compares code strings; strings only at the edge (the wire keeps
//! `ToolError.code` as text, since plugins may add codes of their own).
//! Also the confirmation convention ([`CONFIRM_META_KEY`]).

use quiver_abi::{ErrorCode, ToolError};

/// A code the host knows. Tool-specific codes (any other string a plugin sends) have no
/// variant: [`Code::of`] answers `None` for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// Arguments did not match the input schema or the tool rejected them.
    InvalidArguments,
    /// The tool ran and failed.
    ToolError,
    /// The tool panicked; the panic was caught inside the plugin.
    Panic,
    /// No such tool (or not visible to the caller).
    UnknownTool,
    /// A resource the tool needs was not found.
    NotFound,
    /// The tool or the session's profile refused the operation.
    PermissionDenied,
    /// The deadline passed.
    Timeout,
    /// The caller cancelled the call.
    Cancelled,
    /// The plugin's response could not be understood, or the host failed.
    Protocol,
    /// The tool's circuit breaker is open after repeated failures; retryable after
    /// `details.retry_after_ms`.
    CircuitOpen,
    /// The tool needs a person's confirmation and none could be obtained in this call.
    ConfirmationRequired,
    /// The name was removed; the message names the replacement and the removing version.
    ToolRemoved,
    /// A rate limit (per tool, session or principal) refused the call; retryable after
    /// `details.retry_after_ms`.
    RateLimited,
    /// The tool's result does not match its output schema (a fault of the tool).
    InvalidOutput,
    /// The process running the tool died during the call.
    PluginCrashed,
    /// The tool's plugin could not take the call; it did not reach the tool.
    PluginUnavailable,
}

impl Code {
    /// Every code, in a stable order.
    pub const ALL: [Code; 16] = [
        Code::InvalidArguments,
        Code::ToolError,
        Code::Panic,
        Code::UnknownTool,
        Code::NotFound,
        Code::PermissionDenied,
        Code::Timeout,
        Code::Cancelled,
        Code::Protocol,
        Code::CircuitOpen,
        Code::ConfirmationRequired,
        Code::ToolRemoved,
        Code::RateLimited,
        Code::InvalidOutput,
        Code::PluginCrashed,
        Code::PluginUnavailable,
    ];

    /// The code as it goes on the wire (`ToolError.code`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArguments => ErrorCode::INVALID_ARGUMENTS,
            Code::ToolError => ErrorCode::TOOL_ERROR,
            Code::Panic => ErrorCode::PANIC,
            Code::UnknownTool => ErrorCode::UNKNOWN_TOOL,
            Code::NotFound => ErrorCode::NOT_FOUND,
            Code::PermissionDenied => ErrorCode::PERMISSION_DENIED,
            Code::Timeout => ErrorCode::TIMEOUT,
            Code::Cancelled => ErrorCode::CANCELLED,
            Code::Protocol => ErrorCode::PROTOCOL,
            Code::CircuitOpen => "circuit_open",
            Code::ConfirmationRequired => "confirmation_required",
            Code::ToolRemoved => "tool_removed",
            Code::RateLimited => "rate_limited",
            Code::InvalidOutput => "invalid_output",
            Code::PluginCrashed => ErrorCode::PLUGIN_CRASHED,
            Code::PluginUnavailable => ErrorCode::PLUGIN_UNAVAILABLE,
        }
    }

    /// True for the errors that may come after the tool began and leave its outcome unknown
    /// to the caller: a timeout, or the tool's process dying under the call. A tool that knows
    /// nothing ran answers with another code.
    pub const fn outcome_unknown(self) -> bool {
        matches!(self, Code::Timeout | Code::PluginCrashed)
    }

    /// The code named `s`; `None` for a tool-specific code.
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The kind of an error; `None` for a tool-specific code.
    pub fn of(error: &ToolError) -> Option<Code> {
        Code::parse(&error.code)
    }

    /// An error of this kind.
    pub fn error(self, message: impl Into<String>) -> ToolError {
        ToolError::new(self.as_str(), message)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// [`Code::CircuitOpen`] as text.
pub const CIRCUIT_OPEN: &str = Code::CircuitOpen.as_str();
/// [`Code::ConfirmationRequired`] as text.
pub const CONFIRMATION_REQUIRED: &str = Code::ConfirmationRequired.as_str();
/// [`Code::ToolRemoved`] as text.
pub const TOOL_REMOVED: &str = Code::ToolRemoved.as_str();
/// [`Code::RateLimited`] as text.
pub const RATE_LIMITED: &str = Code::RateLimited.as_str();
/// [`Code::InvalidOutput`] as text.
pub const INVALID_OUTPUT: &str = Code::InvalidOutput.as_str();

/// The request `_meta` key through which an MCP client marks a call as confirmed by a person
/// (the MCP layer sets [`crate::Call::confirmed`] from it).
pub const CONFIRM_META_KEY: &str = "io.github.quiver/confirmed";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_text() {
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert_eq!(Code::parse("my_tool_specific_code"), None);
        assert_eq!(Code::of(&ToolError::tool("x")), Some(Code::ToolError));
    }
}

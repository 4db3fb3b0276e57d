//! The worker protocol: the messages a host and a worker process exchange over the worker's
//! stdin and stdout, and their framing.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of a `postcard`-encoded
//! [`ToWorker`] or [`ToHost`]. The first frame each way is the handshake: [`Hello`] (protocol
//! version, the plugin's verified library bytes and their sha256, the sandbox to enter) and
//! [`Ready`] (the same protocol version and sha256, the plugin's self-description). Tool
//! requests and responses travel as the JSON text of the call contract (`quiver_abi`), unchanged.
//!
//! Invariants: a frame is never larger than [`MAX_FRAME_BYTES`] (checked before allocating on
//! read); a reader that sees an unknown or malformed frame stops talking to its peer (the host
//! then treats the worker as crashed).

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The protocol generation; both sides must agree in the handshake. v2 added
/// [`ToWorker::HelloAdapter`] (appended, so v1 frames keep their encoding; the version still
/// changed because a v1 worker cannot serve an adapter bundle).
pub const PROTOCOL_VERSION: u32 = 2;

/// Largest frame accepted either way (the library in [`Hello`] and results travel in one frame).
pub const MAX_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// One path the sandbox opens to the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    /// Absolute path.
    pub path: String,
    /// Writes allowed too.
    pub write: bool,
}

/// The sandbox a worker enters before it loads the plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRules {
    /// Paths the plugin may use (besides the system libraries, opened read-only).
    pub paths: Vec<PathRule>,
    /// TCP allowed.
    pub network: bool,
}

/// The host's first frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL_VERSION`] of the host.
    pub protocol: u32,
    /// Plugin id, for the worker's messages.
    pub plugin: String,
    /// sha256 of `library`, as verified by the host.
    pub sha256: String,
    /// The verified library bytes: exactly what the worker loads. Read as one byte string (the
    /// same wire format as a sequence of bytes, without a per-byte visit of megabytes).
    #[serde(with = "serde_bytes")]
    pub library: Vec<u8>,
    /// The sandbox to enter before loading.
    pub sandbox: SandboxRules,
}

/// The host's first frame for an adapter bundle (no library): the verified manifest text, what
/// the host resolved for it, and the sandbox to enter before the adapter is set up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloAdapter {
    /// [`PROTOCOL_VERSION`] of the host.
    pub protocol: u32,
    /// Plugin id, for the worker's messages.
    pub plugin: String,
    /// sha256 of `manifest`, as verified by the host.
    pub sha256: String,
    /// The signed manifest text, exactly as verified.
    pub manifest: String,
    /// The program path, working folder, environment and header values the host resolved.
    pub resolved: crate::adapter::Resolved,
    /// The sandbox to enter before running anything.
    pub sandbox: SandboxRules,
}

/// The worker's first frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ready {
    /// [`PROTOCOL_VERSION`] of the worker.
    pub protocol: u32,
    /// sha256 of the bytes the worker received and loaded.
    pub sha256: String,
    /// The plugin's `PluginInfo` JSON (embedded manifest and derived schemas); empty for an
    /// adapter bundle.
    pub plugin_info: String,
    /// What the sandbox enforces, for operators (`landlock v7: 2 path(s), network denied`).
    pub sandbox: String,
}

/// The host's first frame as the host writes it: [`ToWorker::Hello`] with the library borrowed
/// (no copy of a library of many megabytes per worker start). Same wire format.
#[derive(Debug, Serialize)]
pub enum HelloRef<'a> {
    /// Must stay the first variant, as `ToWorker::Hello` is.
    Hello {
        /// See [`Hello::protocol`].
        protocol: u32,
        /// See [`Hello::plugin`].
        plugin: &'a str,
        /// See [`Hello::sha256`].
        sha256: &'a str,
        /// See [`Hello::library`].
        #[serde(with = "serde_bytes")]
        library: &'a [u8],
        /// See [`Hello::sandbox`].
        sandbox: &'a SandboxRules,
    },
}

/// Host to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToWorker {
    /// The handshake.
    Hello(Hello),
    /// Runs one call.
    Call {
        /// Call id, unique per worker.
        id: u64,
        /// Plugin-local tool name.
        tool: String,
        /// The `ToolRequest` JSON.
        request: String,
        /// Milliseconds until the caller's deadline (the tool's `is_cancelled` turns true then).
        timeout_ms: u64,
        /// Run on the worker's reader thread (the tool answers within microseconds).
        inline: bool,
    },
    /// The caller gave up on a call: `is_cancelled` turns true.
    Cancel {
        /// Call id.
        id: u64,
    },
    /// The client's answer to an [`ToHost::Elicit`] or [`ToHost::Sample`].
    Answer {
        /// Call id.
        id: u64,
        /// Question id within the call.
        seq: u64,
        /// The JSON answer, or why there is none.
        result: Result<String, String>,
    },
    /// The handshake of an adapter bundle (protocol v2); last, so older variants keep their
    /// encoding.
    HelloAdapter(HelloAdapter),
}

/// Worker to host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToHost {
    /// The handshake answer.
    Ready(Ready),
    /// The worker could not load the plugin; it exits after this frame.
    LoadFailed {
        /// What failed and how to fix it.
        message: String,
    },
    /// A call's answer: the `ToolResponse` JSON.
    Done {
        /// Call id.
        id: u64,
        /// The response.
        response: String,
    },
    /// A log line of a running call.
    Log {
        /// Call id.
        id: u64,
        /// `quiver_abi::LogLevel` as its wire value.
        level: u8,
        /// The line.
        message: String,
    },
    /// A progress report of a running call.
    Progress {
        /// Call id.
        id: u64,
        /// Progress so far.
        progress: f64,
        /// Total, when known.
        total: Option<f64>,
        /// What is happening.
        message: String,
    },
    /// A running call asks the user (MCP elicitation); answered by [`ToWorker::Answer`].
    Elicit {
        /// Call id.
        id: u64,
        /// Question id within the call.
        seq: u64,
        /// The request JSON.
        request: String,
    },
    /// A running call asks the client's model (MCP sampling); answered by [`ToWorker::Answer`].
    Sample {
        /// Call id.
        id: u64,
        /// Question id within the call.
        seq: u64,
        /// The request JSON.
        request: String,
    },
}

/// Encodes `message` as one frame into `buf` (cleared first).
pub fn encode<T: Serialize>(message: &T, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.extend_from_slice(&[0; 4]);
    let mut buf2 = std::mem::take(buf);
    buf2 = postcard::to_extend(message, buf2).map_err(io::Error::other)?;
    *buf = buf2;
    let len = buf.len() - 4;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message of {len} bytes is over the {MAX_FRAME_BYTES}-byte frame limit"),
        ));
    }
    buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Writes one frame and flushes.
pub fn write_frame<T: Serialize>(out: &mut impl Write, message: &T, buf: &mut Vec<u8>) -> io::Result<()> {
    encode(message, buf)?;
    out.write_all(buf)?;
    out.flush()
}

/// Reads one frame into `buf` and decodes it; `Ok(None)` at a clean end of stream.
pub fn read_frame<T: for<'de> Deserialize<'de>>(input: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the {MAX_FRAME_BYTES}-byte limit"),
        ));
    }
    buf.clear();
    buf.resize(len, 0);
    input.read_exact(buf)?;
    postcard::from_bytes(buf).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_borrowed_hello_is_the_same_frame_as_the_owned_one() {
        let sandbox = SandboxRules { paths: vec![PathRule { path: "/r".into(), write: true }], network: false };
        let owned = ToWorker::Hello(Hello {
            protocol: 1,
            plugin: "p".into(),
            sha256: "ab".into(),
            library: vec![1, 2, 3],
            sandbox: sandbox.clone(),
        });
        let borrowed =
            HelloRef::Hello { protocol: 1, plugin: "p", sha256: "ab", library: &[1, 2, 3], sandbox: &sandbox };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(&owned, &mut a).unwrap();
        encode(&borrowed, &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn frames_round_trip_and_oversized_lengths_are_refused_before_allocating() {
        let mut buf = Vec::new();
        let mut wire = Vec::new();
        let call = ToWorker::Call { id: 7, tool: "t".into(), request: "{}".into(), timeout_ms: 5, inline: true };
        write_frame(&mut wire, &call, &mut buf).unwrap();
        write_frame(&mut wire, &ToWorker::Cancel { id: 7 }, &mut buf).unwrap();
        let mut r = &wire[..];
        match read_frame::<ToWorker>(&mut r, &mut buf).unwrap() {
            Some(ToWorker::Call { id: 7, tool, inline: true, .. }) => assert_eq!(tool, "t"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(read_frame::<ToWorker>(&mut r, &mut buf).unwrap(), Some(ToWorker::Cancel { id: 7 })));
        assert!(read_frame::<ToWorker>(&mut r, &mut buf).unwrap().is_none(), "clean end of stream");

        let huge = (u32::MAX).to_le_bytes();
        let err = read_frame::<ToWorker>(&mut &huge[..], &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(buf.capacity() < 1 << 20, "no allocation for a refused frame");

        let garbage = [3u8, 0, 0, 0, 0xff, 0xff, 0xff];
        assert!(read_frame::<ToWorker>(&mut &garbage[..], &mut buf).is_err());
    }
}

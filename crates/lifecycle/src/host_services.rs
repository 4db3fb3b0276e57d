//! The host side of the ABI: the `HostServices` table handed to every in-process call, and the
//! backend that calls a loaded library.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use abi_stable::{
    prefix_type::WithMetadata,
    staticref,
    std_types::{RResult, RStr, RString},
};
use quiver_abi::{CallHandle, HostServices, HostServicesRef, LogLevel, PluginModRef};
use quiver_catalog::{CallSink, Dispatch, ToolBackend};

/// Recovers the sink behind a call handle.
///
/// # Safety
/// `call.ptr` must be the `&&dyn CallSink` that [`InProcessBackend::call`] passed for a call
/// that has not returned yet.
unsafe fn sink<'a>(call: CallHandle) -> &'a dyn CallSink {
    // SAFETY: guaranteed by the caller (the pointer was made from such a reference in `call`,
    // which outlives the plugin's use of it).
    unsafe { *(call.ptr as *const &'a dyn CallSink) }
}

/// Runs `f` without letting a host panic unwind into plugin code.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

extern "C" fn host_log(call: CallHandle, level: u8, message: RStr<'_>) {
    // SAFETY: the plugin passes back the handle of the running call.
    guard((), || unsafe { sink(call) }.log(LogLevel::from_u8(level), message.as_str()))
}

extern "C" fn host_progress(call: CallHandle, progress: f64, total: f64, message: RStr<'_>) {
    let total = (!total.is_nan()).then_some(total);
    // SAFETY: as above.
    guard((), || unsafe { sink(call) }.progress(progress, total, message.as_str()))
}

extern "C" fn host_is_cancelled(call: CallHandle) -> bool {
    // SAFETY: as above.
    guard(true, || unsafe { sink(call) }.is_cancelled())
}

fn to_rresult(r: Result<String, String>) -> RResult<RString, RString> {
    match r {
        Ok(s) => RResult::ROk(RString::from(s)),
        Err(e) => RResult::RErr(RString::from(e)),
    }
}

extern "C" fn host_elicit(call: CallHandle, request: RStr<'_>) -> RResult<RString, RString> {
    // SAFETY: as above.
    guard(RResult::RErr(RString::from("host failure during elicitation")), || {
        to_rresult(unsafe { sink(call) }.elicit(request.as_str()))
    })
}

extern "C" fn host_sample(call: CallHandle, request: RStr<'_>) -> RResult<RString, RString> {
    // SAFETY: as above.
    guard(RResult::RErr(RString::from("host failure during sampling")), || {
        to_rresult(unsafe { sink(call) }.sample(request.as_str()))
    })
}

struct Statics;
impl Statics {
    staticref! {
        const SERVICES: WithMetadata<HostServices> = WithMetadata::new(HostServices {
            log: host_log,
            progress: host_progress,
            is_cancelled: host_is_cancelled,
            elicit: host_elicit,
            sample: host_sample,
        })
    }
}

fn host_services() -> HostServicesRef {
    HostServicesRef(Statics::SERVICES.as_prefix())
}

/// Calls into a library loaded in this process.
pub struct InProcessBackend {
    module: PluginModRef,
    /// Per tool (manifest order): how the router runs it.
    dispatch: Vec<Dispatch>,
}

impl InProcessBackend {
    /// Wraps a verified, loaded root module; `dispatch` per tool in manifest order (missing
    /// entries run on a blocking thread).
    pub fn new(module: PluginModRef, dispatch: Vec<Dispatch>) -> InProcessBackend {
        InProcessBackend { module, dispatch }
    }
}

impl InProcessBackend {
    fn call(&self, tool: &str, request: &str, sink: &dyn CallSink) -> RString {
        let handle = CallHandle { ptr: &sink as *const &dyn CallSink as *const c_void };
        // The plugin catches its own panics (SDK); `sink` lives until this call returns.
        (self.module.invoke())(RStr::from_str(tool), RStr::from_str(request), host_services(), handle)
    }
}

impl ToolBackend for InProcessBackend {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        self.call(tool, request, &*sink).into_string()
    }

    fn invoke_borrowed(&self, tool: &str, request: &str, sink: &dyn CallSink, answer: &mut dyn FnMut(&str)) -> bool {
        answer(self.call(tool, request, sink).as_str());
        true
    }

    fn dispatch(&self, index: usize) -> Dispatch {
        self.dispatch.get(index).copied().unwrap_or(Dispatch::Thread)
    }
}

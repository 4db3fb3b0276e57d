//! Test plugin for worker isolation: its tools panic, abort, segfault, spin, sleep past their
//! deadline, allocate far too much, answer garbage or huge results, and try to read and write
//! outside their sandbox or open a socket. Not a user tool.
//!
//! The root module is written out by hand (not with `export_plugin!`) so that `fault_bad_json`
//! can return text that is not a `ToolResponse` at all.

use quiver_abi::abi_stable::std_types::{RStr, RString};
use quiver_abi::serde_json::{Value, json};
use quiver_abi::{
    CallHandle, Context, HostServicesRef, Tool, ToolError,
    schemars::JsonSchema,
    sdk::{Registry, erase},
    serde::{Deserialize, Serialize},
};

/// Text input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Text {
    /// Any text.
    #[serde(default)]
    pub text: String,
}

/// A number input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Amount {
    /// Milliseconds, GiB or MiB, depending on the tool.
    pub n: u64,
}

/// A path or address input.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Target {
    /// A file path or `host:port`.
    pub target: String,
}

/// Any output.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Out {
    /// What happened.
    pub value: Value,
}

fn version() -> &'static str {
    option_env!("QUIVER_FAULT_VERSION").unwrap_or(env!("CARGO_PKG_VERSION"))
}

macro_rules! tool {
    ($t:ident, $name:literal, $input:ty, |$i:ident, $cx:ident| $body:expr) => {
        /// See the manifest.
        pub struct $t;
        impl Tool for $t {
            const NAME: &'static str = $name;
            type Input = $input;
            type Output = Out;
            #[allow(unused_variables, unreachable_code)]
            fn call(&self, $i: $input, $cx: &mut Context<'_>) -> Result<Out, ToolError> {
                Ok(Out { value: $body })
            }
        }
    };
}

tool!(Echo, "fault_echo", Text, |i, cx| json!({ "text": i.text, "version": version(), "pid": std::process::id() }));
tool!(Panic, "fault_panic", Text, |i, cx| panic!("fault_panic: {}", i.text));
tool!(Abort, "fault_abort", Text, |i, cx| std::process::abort());
tool!(Segv, "fault_segv", Text, |i, cx| {
    // SAFETY: none; this is the point of the tool.
    unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
    Value::Null
});
tool!(Spin, "fault_spin", Text, |i, cx| {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
});
tool!(Sleep, "fault_sleep", Amount, |i, cx| {
    std::thread::sleep(std::time::Duration::from_millis(i.n));
    json!({ "slept_ms": i.n })
});
tool!(Alloc, "fault_alloc", Amount, |i, cx| {
    let mut v: Vec<u8> = Vec::with_capacity((i.n as usize) << 30);
    v.resize(v.capacity(), 1);
    json!({ "allocated": v.len() })
});
tool!(BadJson, "fault_bad_json", Text, |i, cx| Value::Null);
tool!(Big, "fault_big", Amount, |i, cx| Value::String("x".repeat((i.n as usize) << 20)));
tool!(HostileRead, "hostile_read", Target, |i, cx| match std::fs::read_to_string(&i.target) {
    Ok(text) => json!({ "ok": true, "bytes": text.len() }),
    Err(e) =>
        json!({ "ok": false, "error": e.to_string(), "permission_denied": e.kind() == std::io::ErrorKind::PermissionDenied }),
});
tool!(HostileWrite, "hostile_write", Target, |i, cx| match std::fs::write(&i.target, "written by hostile_write\n") {
    Ok(()) => json!({ "ok": true }),
    Err(e) =>
        json!({ "ok": false, "error": e.to_string(), "permission_denied": e.kind() == std::io::ErrorKind::PermissionDenied }),
});
tool!(HostileConnect, "hostile_connect", Target, |i, cx| match std::net::TcpStream::connect(&i.target) {
    Ok(_) => json!({ "ok": true }),
    Err(e) =>
        json!({ "ok": false, "error": e.to_string(), "permission_denied": e.kind() == std::io::ErrorKind::PermissionDenied }),
});

tool!(Services, "fault_services", Text, |i, cx| {
    cx.log(quiver_abi::LogLevel::Info, &format!("log from the worker: {}", i.text));
    cx.progress(1.0, Some(2.0), "half way");
    let asked = cx.elicit("Proceed?", json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}));
    let sampled = cx.sample(json!({"messages": [], "maxTokens": 5}));
    json!({
        "elicited": asked.map_err(|e| e.message),
        "sampled": sampled.map_err(|e| e.message),
        "cancelled": cx.is_cancelled(),
        "config": cx.config(),
    })
});

fn manifest() -> &'static str {
    const SOURCE: &str = include_str!("../tool.yaml");
    match option_env!("QUIVER_FAULT_VERSION") {
        Some(v) => Box::leak(SOURCE.replacen("version: 0.1.0", &format!("version: {v}"), 1).into_boxed_str()),
        None => SOURCE,
    }
}

static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();

fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        Registry::new(
            manifest(),
            vec![
                erase(Echo),
                erase(Panic),
                erase(Abort),
                erase(Segv),
                erase(Spin),
                erase(Sleep),
                erase(Alloc),
                erase(BadJson),
                erase(Big),
                erase(HostileRead),
                erase(HostileWrite),
                erase(HostileConnect),
                erase(Services),
            ],
        )
    })
}

extern "C" fn abi_version() -> u32 {
    quiver_abi::ABI_VERSION
}

extern "C" fn plugin_info() -> RString {
    quiver_abi::sdk::__plugin_info(registry)
}

extern "C" fn invoke(tool: RStr<'_>, request: RStr<'_>, host: HostServicesRef, call: CallHandle) -> RString {
    if tool.as_str() == "fault_bad_json" {
        return RString::from("this is { not JSON");
    }
    quiver_abi::sdk::__invoke(registry, tool, request, host, call)
}

struct Statics;
impl Statics {
    quiver_abi::abi_stable::staticref! {
        const MODULE: quiver_abi::abi_stable::prefix_type::WithMetadata<quiver_abi::PluginMod> =
            quiver_abi::abi_stable::prefix_type::WithMetadata::new(quiver_abi::PluginMod { abi_version, plugin_info, invoke })
    }
}

fn root_module() -> quiver_abi::PluginModRef {
    quiver_abi::PluginModRef(Statics::MODULE.as_prefix())
}

/// The library header the host's loader looks for (what `export_plugin!` writes).
#[unsafe(no_mangle)]
pub static _1as_0lib_1header_0root_bmodule_bloader: quiver_abi::abi_stable::library::LibHeader = {
    extern "C" fn erased_module() -> quiver_abi::abi_stable::library::RootModuleResult {
        quiver_abi::abi_stable::library::__call_root_module_loader(root_module)
    }
    // SAFETY: `erased_module` returns the root module of type `PluginModRef`.
    unsafe {
        quiver_abi::abi_stable::library::LibHeader::from_constructor::<quiver_abi::PluginModRef>(
            erased_module,
            quiver_abi::abi_stable::library::CheckTypeLayout::Yes,
        )
    }
};

//! Untrusted YAML through the manifest and configuration readers: never a panic, never a hang
//! (size and nesting caps), only `Ok` or a list of issues.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = quiver_manifest::Manifest::from_yaml(text, "fuzz.tool.yaml");
        let _ = quiver_manifest::HostConfig::from_yaml(text, "fuzz.quiver.yaml");
    }
});

//! Untrusted signature and key text: key parsing, signature decoding and verification against a
//! fixed key, and the bundle trusted-comment check. Never a panic; a signature by another key
//! or over other data is never accepted.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quiver_manifest::{KeyPair, TrustedKeys};

fn keys() -> &'static (KeyPair, TrustedKeys) {
    static KEYS: OnceLock<(KeyPair, TrustedKeys)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let pair = KeyPair::generate();
        let trusted = TrustedKeys::new().with("fuzz", "fuzz", pair.public_key().clone());
        (pair, trusted)
    })
}

fuzz_target!(|data: &[u8]| {
    let (_, trusted) = keys();
    let text = String::from_utf8_lossy(data);
    let _ = quiver_manifest::PublicKey::parse(&text);
    let _ = quiver_manifest::KeyPair::from_secret_key_text(&text);
    // The fuzzer does not hold the secret key, so nothing it writes may verify.
    assert!(quiver_manifest::verify(trusted, b"manifest_version: 1\n", &text).is_err());
    let _ = quiver_manifest::check_bundle_comment(&text, "fuzz", "1.0.0", "00");
});

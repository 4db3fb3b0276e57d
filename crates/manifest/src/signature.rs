//! Manifest signatures in the minisign format, so the `minisign` command-line tool and Quiver
//! interoperate: keys and signatures made by either are accepted by the other.
//!
//! Verification uses `minisign-verify` and accepts only pre-hashed signatures (minisign 0.8 and
//! later; legacy signatures are refused). Key generation and signing use the `minisign` crate
//! with unencrypted secret keys, so nothing ever prompts for a password.

use std::fmt;
use std::io::Cursor;

/// Untrusted comment written above a secret key made here.
const SECRET_KEY_COMMENT: &str = "minisign secret key (unencrypted, made by quiver)";

/// Length of a decoded minisign secret key: algorithms, KDF parameters, key id, key, checksum.
const SECRET_KEY_BYTES: usize = 2 + 2 + 2 + 32 + 8 + 8 + 8 + 64 + 32;

/// A problem with a key's text (public or secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KeyError {
    message: String,
}

impl KeyError {
    fn new(message: impl Into<String>) -> KeyError {
        KeyError { message: message.into() }
    }
}

/// A minisign public key.
#[derive(Clone)]
pub struct PublicKey {
    inner: minisign_verify::PublicKey,
    key_id: [u8; 8],
    base64: String,
}

impl PublicKey {
    /// Parses a public key: the text of a minisign `.pub` file (an `untrusted comment:` line, then
    /// the base64 key line) or the base64 key line alone. Surrounding whitespace is ignored.
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let (comment, line) = match lines.as_slice() {
            [line] => (None, *line),
            [comment, line] if comment.starts_with("untrusted comment:") => (Some(*comment), *line),
            _ => {
                return Err(KeyError::new(
                    "not a minisign public key: expected the two lines of a `.pub` file (`untrusted comment: ...` and the key) or the key line alone",
                ));
            }
        };
        if comment.is_some_and(|c| c.contains("secret key")) {
            return Err(KeyError::new(
                "this is a minisign SECRET key, not a public key: use the `.pub` file (and keep the secret key private)",
            ));
        }
        let inner = minisign_verify::PublicKey::from_base64(line).map_err(|_| {
            KeyError::new("not a minisign public key: the key line must be 56 base64 characters (it starts with `RW`)")
        })?;
        let bytes = decode_base64(line).filter(|b| b.len() == 42 && b[..2] == *b"Ed").ok_or_else(|| {
            KeyError::new(
                "not a minisign Ed25519 public key: the key line must be 56 base64 characters starting with `RW`",
            )
        })?;
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&bytes[2..10]);
        Ok(PublicKey { inner, key_id, base64: line.to_owned() })
    }

    /// The key id as minisign prints it: 16 upper-case hex digits.
    pub fn key_id(&self) -> String {
        format_key_id(self.key_id)
    }

    /// The base64 key line.
    pub fn to_base64(&self) -> &str {
        &self.base64
    }

    /// The text of a minisign `.pub` file for this key.
    pub fn to_file_text(&self) -> String {
        format!("untrusted comment: minisign public key {}\n{}\n", self.key_id(), self.base64)
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &PublicKey) -> bool {
        self.base64 == other.base64
    }
}

impl Eq for PublicKey {}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.key_id())
    }
}

fn format_key_id(id: [u8; 8]) -> String {
    // minisign stores the id little-endian and prints it as a number.
    format!("{:016X}", u64::from_le_bytes(id))
}

/// One trusted key and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// A human name (`local-dev`), or the key id when none was given.
    pub name: String,
    /// Where the key was read from (a file path, `quiver.yaml trusted_keys[1]`).
    pub source: String,
    /// The key.
    pub key: PublicKey,
    /// Plugin id globs this key may sign (see [`crate::glob_matches`]); empty: any id.
    pub plugins: Vec<String>,
}

impl TrustedKey {
    /// True when this key may sign the plugin `id`.
    pub fn may_sign(&self, id: &str) -> bool {
        self.plugins.is_empty() || self.plugins.iter().any(|g| crate::glob_matches(g, id))
    }
}

/// The keys whose signatures are accepted. Assembled by the caller (which reads key files);
/// empty means no signature is accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedKeys {
    keys: Vec<TrustedKey>,
}

impl TrustedKeys {
    /// No keys.
    pub fn new() -> TrustedKeys {
        TrustedKeys::default()
    }

    /// Adds a key; an empty `name` becomes the key id. Returns false (and keeps the first) when
    /// the same key is already present.
    pub fn add(&mut self, name: impl Into<String>, source: impl Into<String>, key: PublicKey) -> bool {
        self.add_for(name, source, key, Vec::new())
    }

    /// Adds a key that may sign only the plugin ids matching `plugins` (globs; empty: any).
    pub fn add_for(
        &mut self,
        name: impl Into<String>,
        source: impl Into<String>,
        key: PublicKey,
        plugins: Vec<String>,
    ) -> bool {
        if self.keys.iter().any(|k| k.key == key) {
            return false;
        }
        let name = name.into();
        let name = if name.is_empty() { key.key_id() } else { name };
        self.keys.push(TrustedKey { name, source: source.into(), key, plugins });
        true
    }

    /// Adds a key, builder style.
    pub fn with(mut self, name: impl Into<String>, source: impl Into<String>, key: PublicKey) -> TrustedKeys {
        self.add(name, source, key);
        self
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &TrustedKey> {
        self.keys.iter()
    }

    /// The first key with this id (16 hex digits, any case).
    pub fn find(&self, key_id: &str) -> Option<&TrustedKey> {
        self.keys.iter().find(|k| k.key.key_id().eq_ignore_ascii_case(key_id))
    }
}

/// A signature that checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Id of the key that made the signature (16 upper-case hex digits).
    pub key_id: String,
    /// Name of that key in the trusted set.
    pub key_name: String,
    /// The signed (trusted) comment of the signature.
    pub trusted_comment: String,
    /// Plugin id globs the key may sign (empty: any).
    pub plugins: Vec<String>,
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The trusted set is empty, so nothing can be accepted.
    #[error(
        "no trusted keys are configured, so no signature can be accepted; add the publisher's public key to `trusted_keys` in quiver.yaml"
    )]
    NoTrustedKeys,
    /// The text is not a (supported) minisign signature.
    #[error(
        "the signature is malformed: {reason}; a minisign signature has four lines (untrusted comment, signature, trusted comment, global signature): re-sign with `quiver sign` or `minisign -S`"
    )]
    Malformed {
        /// What is wrong with it.
        reason: String,
    },
    /// Signed by a key that is not trusted.
    #[error(
        "signed by key {key_id}, which is not trusted (trusted keys: {}); add its public key to `trusted_keys` in quiver.yaml if you trust its owner, or re-sign with a trusted key",
        .trusted.join(", ")
    )]
    UntrustedKey {
        /// Id of the signing key.
        key_id: String,
        /// Ids of the trusted keys.
        trusted: Vec<String>,
    },
    /// Made by a trusted key, but over other data: the data or the signed comment changed.
    #[error(
        "the signature by trusted key {key_id} does not match the data: the file (or the signature's trusted comment) was changed after signing; restore the signed file or sign it again"
    )]
    Mismatch {
        /// Id of the signing key.
        key_id: String,
    },
}

/// Checks that `signature_text` (a `.minisig` file) is a signature over `data` by one of the
/// trusted keys.
pub fn verify(trusted: &TrustedKeys, data: &[u8], signature_text: &str) -> Result<Verified, SignatureError> {
    if trusted.is_empty() {
        return Err(SignatureError::NoTrustedKeys);
    }
    let malformed = |reason: &str| SignatureError::Malformed { reason: reason.to_owned() };
    let signature = minisign_verify::Signature::decode(signature_text).map_err(|e| match e {
        minisign_verify::Error::UnsupportedAlgorithm => malformed("unsupported signature algorithm"),
        _ => malformed("not a minisign signature"),
    })?;
    let id = signature_text
        .lines()
        .nth(1)
        .and_then(decode_base64)
        .filter(|b| b.len() == 74)
        .map(|b| {
            let mut id = [0u8; 8];
            id.copy_from_slice(&b[2..10]);
            id
        })
        .ok_or_else(|| malformed("not a minisign signature"))?;
    let key_id = format_key_id(id);
    let mut matched = false;
    for candidate in trusted.keys.iter().filter(|k| k.key.key_id == id) {
        matched = true;
        match candidate.key.inner.verify(data, &signature, false) {
            Ok(()) => {
                return Ok(Verified {
                    key_id,
                    key_name: candidate.name.clone(),
                    trusted_comment: signature.trusted_comment().to_owned(),
                    plugins: candidate.plugins.clone(),
                });
            }
            Err(minisign_verify::Error::UnexpectedAlgorithm) => {
                return Err(malformed(
                    "legacy (not pre-hashed) signatures are not accepted, sign with minisign 0.8 or later",
                ));
            }
            Err(_) => {}
        }
    }
    if matched {
        Err(SignatureError::Mismatch { key_id })
    } else {
        Err(SignatureError::UntrustedKey { key_id, trusted: trusted.keys.iter().map(|k| k.key.key_id()).collect() })
    }
}

/// A signing key pair (Ed25519, minisign format). The secret key is never encrypted.
#[derive(Clone)]
pub struct KeyPair {
    inner: minisign::KeyPair,
    public: PublicKey,
}

impl KeyPair {
    /// Makes a new key pair.
    ///
    /// # Panics
    /// When the operating system's random number generator fails.
    pub fn generate() -> KeyPair {
        let inner = minisign::KeyPair::generate_unencrypted_keypair()
            .expect("the operating system's random number generator failed");
        KeyPair::from_inner(inner).expect("a freshly generated minisign key is well formed")
    }

    /// Reads an unencrypted minisign secret key file (as written by [`KeyPair::secret_key_text`]
    /// or `minisign -G -W`). Encrypted keys are refused: nothing here asks for a password.
    pub fn from_secret_key_text(text: &str) -> Result<KeyPair, KeyError> {
        let text = text.trim();
        let mut lines = text.lines();
        let comment = lines.next().unwrap_or_default();
        if !comment.starts_with("untrusted comment:") || lines.next().is_none() {
            return Err(KeyError::new(
                "not a minisign secret key file: expected an `untrusted comment:` line and the key line",
            ));
        }
        let unusable = |why: &str| {
            KeyError::new(format!(
                "cannot use this secret key ({why}); only unencrypted minisign keys are supported: make one with `quiver keygen` or `minisign -G -W`"
            ))
        };
        let boxed = minisign::SecretKeyBox::from_string(text).map_err(|e| unusable(&e.to_string()))?;
        let secret = match boxed.into_unencrypted_secret_key() {
            Ok(secret) => secret,
            Err(e) => {
                // `minisign -G -W` (0.11) leaves the checksum of an unencrypted key zeroed, which
                // the minisign crate calls corrupted. Accept exactly that case; the signing
                // self-test below catches a key whose halves do not belong together.
                let bytes = text.lines().nth(1).and_then(decode_base64).ok_or_else(|| unusable(&e.to_string()))?;
                let unchecked = bytes.len() == SECRET_KEY_BYTES
                    && bytes[..2] == *b"Ed"
                    && bytes[2..4] == [0, 0]
                    && bytes[SECRET_KEY_BYTES - 32..].iter().all(|b| *b == 0);
                if !unchecked {
                    return Err(unusable(&e.to_string()));
                }
                minisign::SecretKey::from_bytes(&bytes).map_err(|e| unusable(&e.to_string()))?
            }
        };
        let public = minisign::PublicKey::from_secret_key(&secret).map_err(|e| unusable(&e.to_string()))?;
        // Signing with `Some(pk)` checks the signature against the public half.
        minisign::sign(Some(&public), &secret, Cursor::new(b"self-test"), None, None)
            .map_err(|_| unusable("its public and secret halves do not match: the key is corrupted"))?;
        KeyPair::from_inner(minisign::KeyPair { pk: public, sk: secret })
    }

    fn from_inner(inner: minisign::KeyPair) -> Result<KeyPair, KeyError> {
        let public = PublicKey::parse(&inner.pk.to_base64())?;
        Ok(KeyPair { inner, public })
    }

    /// The public half.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The key id (16 upper-case hex digits).
    pub fn key_id(&self) -> String {
        self.public.key_id()
    }

    /// The text of the minisign `.pub` file.
    pub fn public_key_text(&self) -> String {
        self.public.to_file_text()
    }

    /// The text of an unencrypted minisign secret key file (readable by `minisign -S -s`).
    /// Keep it private.
    pub fn secret_key_text(&self) -> String {
        self.inner.sk.to_box(Some(SECRET_KEY_COMMENT)).expect("writing a key to a String cannot fail").into_string()
    }
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair").field("key_id", &self.key_id()).field("secret", &"<redacted>").finish()
    }
}

/// Signs `data`, returning the text of a `.minisig` file. Line breaks in `trusted_comment`
/// become spaces (the comment is one line of the file).
///
/// # Panics
/// When the operating system's random number generator fails.
pub fn sign(key: &KeyPair, data: &[u8], trusted_comment: &str) -> String {
    let trusted_comment = trusted_comment.replace(['\r', '\n'], " ");
    let untrusted_comment = format!("signature from minisign secret key {}", key.key_id());
    minisign::sign(
        Some(&key.inner.pk),
        &key.inner.sk,
        Cursor::new(data),
        Some(&trusted_comment),
        Some(&untrusted_comment),
    )
    .expect("signing with an unencrypted key fails only when the random number generator does")
    .into_string()
}

/// First word of a bundle signature's trusted comment.
pub const BUNDLE_COMMENT_PREFIX: &str = "quiver-bundle";

/// The trusted comment of a bundle signature: binds the plugin id, its version and the
/// library's sha256, so a signature cannot be moved to another plugin or version even by a
/// tool that shows only the comment (`minisign -V` prints it).
pub fn bundle_comment(id: &str, version: &str, sha256: &str) -> String {
    format!("{BUNDLE_COMMENT_PREFIX} id={id} version={version} sha256={sha256}")
}

/// Checks a verified bundle signature's trusted comment against the manifest it signs.
/// Comments of other signers (`quiver sign` before this format, `minisign -S -t ...`) are
/// refused with how to re-sign.
pub fn check_bundle_comment(comment: &str, id: &str, version: &str, sha256: &str) -> Result<(), String> {
    let mut words = comment.split(' ');
    if words.next() != Some(BUNDLE_COMMENT_PREFIX) {
        return Err(format!(
            "the signature's trusted comment `{}` is not a Quiver bundle comment (`{BUNDLE_COMMENT_PREFIX} id=... version=... sha256=...`), which binds the signature to one plugin id, version and library; re-sign the bundle with `quiver sign` or `cargo xtask build-plugins` (with the minisign tool: `minisign -S ... -t \"{}\"`)",
            crate::error::excerpt(comment),
            bundle_comment(id, version, sha256)
        ));
    }
    let mut seen = [None, None, None];
    for w in words {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        let slot = match k {
            "id" => 0,
            "version" => 1,
            "sha256" => 2,
            _ => continue,
        };
        if seen[slot].replace(v).is_some() {
            return Err(format!("the signature's trusted comment names `{k}` twice; re-sign the bundle"));
        }
    }
    for ((name, want), got) in [("id", id), ("version", version), ("sha256", sha256)].into_iter().zip(seen) {
        match got {
            Some(got) if got == want => {}
            Some(got) => {
                return Err(format!(
                    "the signature was made for {name} `{}` but the manifest says `{want}`: a signature cannot be reused for another plugin, version or library; re-sign the bundle",
                    crate::error::excerpt(got)
                ));
            }
            None => {
                return Err(format!(
                    "the signature's trusted comment lacks `{name}=`; re-sign the bundle with `quiver sign` or `cargo xtask build-plugins`"
                ));
            }
        }
    }
    Ok(())
}

/// Signs a bundle manifest (one with `artifact`, or an adapter manifest), with the trusted
/// comment of [`bundle_comment`]. For an adapter bundle, which has no library, the comment's
/// `sha256` is that of the manifest bytes themselves (what the signature covers). Fails when the
/// text is not a valid bundle manifest.
pub fn sign_bundle(key: &KeyPair, manifest_text: &str, origin: &str) -> Result<String, crate::ManifestError> {
    let manifest = crate::Manifest::from_yaml(manifest_text, origin)?;
    let sha256 = match (&manifest.artifact, &manifest.adapter) {
        (Some(artifact), _) => artifact.sha256.clone(),
        (None, Some(_)) => crate::sha256_hex(manifest_text.as_bytes()),
        (None, None) => {
            return Err(crate::ManifestError::single(
                origin,
                crate::Issue::new(
                    "artifact",
                    "a bundle manifest must name its library",
                    "add the library with `quiver sign --library FILE` or build with `cargo xtask build-plugins`",
                ),
            ));
        }
    };
    let comment = bundle_comment(&manifest.id, &manifest.version.to_string(), &sha256);
    Ok(sign(key, manifest_text.as_bytes(), &comment))
}

/// Strict standard base64 (with padding).
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let bytes = text.trim_end().as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let n_chunks = bytes.len() / 4;
    let mut out = Vec::with_capacity(n_chunks * 3);
    for (n, chunk) in bytes.chunks(4).enumerate() {
        let mut acc = 0u32;
        let mut padding = 0;
        for (k, &c) in chunk.iter().enumerate() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'+' => 62,
                b'/' => 63,
                b'=' if n + 1 == n_chunks && k >= 2 => {
                    padding += 1;
                    0
                }
                _ => return None,
            };
            if padding > 0 && c != b'=' {
                return None;
            }
            acc = (acc << 6) | u32::from(v);
        }
        out.extend_from_slice(&acc.to_be_bytes()[1..4 - padding]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    const DATA: &[u8] = b"manifest_version: 1\nid: demo\n";

    fn trusted(key: &KeyPair) -> TrustedKeys {
        TrustedKeys::new().with("test", "test", key.public_key().clone())
    }

    #[test]
    fn sign_verify_roundtrip() {
        let key = KeyPair::generate();
        let sig = sign(&key, DATA, "quiver bundle demo 0.1.0");
        assert!(sig.starts_with("untrusted comment: "), "{sig}");
        let verified = verify(&trusted(&key), DATA, &sig).unwrap();
        assert_eq!(verified.key_id, key.key_id());
        assert_eq!(verified.key_name, "test");
        assert_eq!(verified.trusted_comment, "quiver bundle demo 0.1.0");
    }

    #[test]
    fn flipped_byte_is_rejected() {
        let key = KeyPair::generate();
        let sig = sign(&key, DATA, "c");
        for at in [0, DATA.len() / 2, DATA.len() - 1] {
            let mut tampered = DATA.to_vec();
            tampered[at] ^= 0x01;
            assert_eq!(verify(&trusted(&key), &tampered, &sig), Err(SignatureError::Mismatch { key_id: key.key_id() }));
        }
    }

    #[test]
    fn tampered_trusted_comment_is_rejected() {
        let key = KeyPair::generate();
        let sig = sign(&key, DATA, "version 1");
        let tampered = sig.replace("trusted comment: version 1", "trusted comment: version 2");
        assert!(matches!(verify(&trusted(&key), DATA, &tampered), Err(SignatureError::Mismatch { .. })));
    }

    #[test]
    fn other_key_is_rejected_with_its_id() {
        let ours = KeyPair::generate();
        let theirs = KeyPair::generate();
        let sig = sign(&theirs, DATA, "c");
        let err = verify(&trusted(&ours), DATA, &sig).unwrap_err();
        assert_eq!(err, SignatureError::UntrustedKey { key_id: theirs.key_id(), trusted: vec![ours.key_id()] });
        assert!(err.to_string().contains(&theirs.key_id()), "{err}");
    }

    #[test]
    fn malformed_and_no_keys() {
        let key = KeyPair::generate();
        for bad in ["", "hello", "untrusted comment: x\nAAAA\ntrusted comment: y\nAAAA\n"] {
            assert!(matches!(verify(&trusted(&key), DATA, bad), Err(SignatureError::Malformed { .. })), "{bad:?}");
        }
        let sig = sign(&key, DATA, "c");
        assert_eq!(verify(&TrustedKeys::new(), DATA, &sig), Err(SignatureError::NoTrustedKeys));
    }

    #[test]
    fn keys_parse_in_both_forms_and_roundtrip() {
        let key = KeyPair::generate();
        let text = key.public_key_text();
        assert!(text.contains(&key.key_id()));
        let from_file = PublicKey::parse(&text).unwrap();
        let from_line = PublicKey::parse(&format!("  {}  \n", key.public_key().to_base64())).unwrap();
        assert_eq!(from_file, from_line);
        assert_eq!(from_file.key_id(), key.key_id());
        assert_eq!(key.key_id().len(), 16);
        assert!(key.key_id().chars().all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));

        let again = KeyPair::from_secret_key_text(&key.secret_key_text()).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        let sig = sign(&again, DATA, "c");
        assert!(verify(&trusted(&key), DATA, &sig).is_ok());

        assert!(PublicKey::parse("not a key").is_err());
        assert!(PublicKey::parse(&key.secret_key_text()).unwrap_err().to_string().contains("SECRET"));
        assert!(KeyPair::from_secret_key_text(&text).is_err());
        assert!(!format!("{key:?}").contains(&key.secret_key_text()[40..60]));
    }

    #[test]
    fn trusted_keys_dedupe_and_find() {
        let key = KeyPair::generate();
        let mut keys = TrustedKeys::new();
        assert!(keys.add("", "a.pub", key.public_key().clone()));
        assert!(!keys.add("again", "b.pub", key.public_key().clone()));
        assert_eq!(keys.len(), 1);
        assert_eq!(keys.find(&key.key_id().to_lowercase()).unwrap().name, key.key_id());
    }

    #[test]
    fn bundle_comments_bind_id_version_and_sha256() {
        let sha = "a".repeat(64);
        let c = bundle_comment("demo", "1.2.0", &sha);
        assert_eq!(check_bundle_comment(&c, "demo", "1.2.0", &sha), Ok(()));
        for (id, version, s) in
            [("other", "1.2.0", sha.as_str()), ("demo", "1.1.0", sha.as_str()), ("demo", "1.2.0", "b")]
        {
            let e = check_bundle_comment(&c, id, version, s).unwrap_err();
            assert!(e.contains("re-sign"), "{e}");
        }
        let legacy = check_bundle_comment("test bundle demo", "demo", "1.2.0", &sha).unwrap_err();
        assert!(legacy.contains("not a Quiver bundle comment"), "{legacy}");
        // A minisign user learns the exact comment to pass.
        assert!(legacy.contains(&format!("minisign -S ... -t \"{c}\"")), "{legacy}");
        let partial = check_bundle_comment("quiver-bundle id=demo version=1.2.0", "demo", "1.2.0", &sha).unwrap_err();
        assert!(partial.contains("lacks `sha256=`"), "{partial}");
        let twice = format!("{c} id=other");
        assert!(check_bundle_comment(&twice, "demo", "1.2.0", &sha).unwrap_err().contains("twice"));
    }

    #[test]
    fn keys_are_scoped_to_plugin_ids() {
        let key = KeyPair::generate();
        let mut keys = TrustedKeys::new();
        keys.add_for("acme", "t", key.public_key().clone(), vec!["acme-*".into()]);
        let k = keys.find(&key.key_id()).unwrap();
        assert!(k.may_sign("acme-fs") && !k.may_sign("fs-tools"));
        let v = verify(&keys, DATA, &sign(&key, DATA, "c")).unwrap();
        assert_eq!(v.plugins, ["acme-*"]);
    }

    #[test]
    fn base64() {
        assert_eq!(decode_base64("TWFu").unwrap(), b"Man");
        assert_eq!(decode_base64("TWE=").unwrap(), b"Ma");
        assert_eq!(decode_base64("TQ==").unwrap(), b"M");
        assert!(decode_base64("TQ=a").is_none());
        assert!(decode_base64("T=Q=").is_none());
        assert!(decode_base64("TQ==TQ==").is_none());
        assert!(decode_base64("TWF").is_none());
    }

    /// The `minisign` binary, when installed.
    fn minisign_cli() -> Option<&'static str> {
        let ok = Command::new("minisign").arg("-v").output().is_ok_and(|o| o.status.success());
        if ok {
            Some("minisign")
        } else {
            // CI installs the tool (`.ci/run`) and sets this, so the test cannot silently skip there.
            assert!(
                std::env::var_os("QUIVER_REQUIRE_MINISIGN").is_none(),
                "QUIVER_REQUIRE_MINISIGN is set but the `minisign` command is not installed (apt-get install minisign)"
            );
            eprintln!("note: the `minisign` command is not installed; skipping the interoperability test");
            None
        }
    }

    fn run(cmd: &mut Command) -> std::process::Output {
        let out = cmd.stdin(std::process::Stdio::null()).output().expect("run minisign");
        assert!(
            out.status.success(),
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn interoperates_with_the_minisign_cli() {
        let Some(cli) = minisign_cli() else { return };
        let dir = tempfile::tempdir().unwrap();
        let data_path = dir.path().join("tool.yaml");
        std::fs::write(&data_path, DATA).unwrap();

        // The CLI makes a key and signs; we verify.
        let (cli_pub, cli_sec) = (dir.path().join("cli.pub"), dir.path().join("cli.key"));
        run(Command::new(cli).arg("-G").arg("-W").arg("-p").arg(&cli_pub).arg("-s").arg(&cli_sec));
        run(Command::new(cli)
            .arg("-S")
            .arg("-s")
            .arg(&cli_sec)
            .arg("-m")
            .arg(&data_path)
            .arg("-t")
            .arg("signed by the cli"));
        let cli_key = PublicKey::parse(&read(&cli_pub)).unwrap();
        // minisign prints the id as a number without leading zeros (one key in 16 has one).
        let printed = read(&cli_pub);
        let printed = printed.lines().next().and_then(|l| l.rsplit(' ').next()).unwrap();
        assert_eq!(
            u64::from_str_radix(printed, 16).unwrap(),
            u64::from_str_radix(&cli_key.key_id(), 16).unwrap(),
            "our key id must be the one minisign prints ({printed})"
        );
        let keys = TrustedKeys::new().with("cli", cli_pub.display().to_string(), cli_key.clone());
        let sig_path = dir.path().join("tool.yaml.minisig");
        let verified = verify(&keys, DATA, &read(&sig_path)).unwrap();
        assert_eq!(verified.key_id, cli_key.key_id());
        assert_eq!(verified.trusted_comment, "signed by the cli");
        assert!(matches!(verify(&keys, b"changed", &read(&sig_path)), Err(SignatureError::Mismatch { .. })));

        // We read the CLI's unencrypted secret key and sign; we verify.
        let from_cli = KeyPair::from_secret_key_text(&read(&cli_sec)).unwrap();
        assert_eq!(from_cli.public_key(), &cli_key);
        assert!(verify(&keys, DATA, &sign(&from_cli, DATA, "c")).is_ok());

        // We make a key and sign; the CLI verifies.
        let ours = KeyPair::generate();
        let (our_pub, our_sec) = (dir.path().join("ours.pub"), dir.path().join("ours.key"));
        std::fs::write(&our_pub, ours.public_key_text()).unwrap();
        std::fs::write(&our_sec, ours.secret_key_text()).unwrap();
        std::fs::write(&sig_path, sign(&ours, DATA, "signed by quiver")).unwrap();
        let out = run(Command::new(cli).arg("-V").arg("-p").arg(&our_pub).arg("-m").arg(&data_path));
        assert!(String::from_utf8_lossy(&out.stdout).contains("signed by quiver"));
        std::fs::write(&data_path, b"changed").unwrap();
        let out = Command::new(cli).arg("-V").arg("-p").arg(&our_pub).arg("-m").arg(&data_path).output().unwrap();
        assert!(!out.status.success(), "the CLI must reject changed data");

        // The CLI signs with our secret key file; we verify.
        std::fs::write(&data_path, DATA).unwrap();
        run(Command::new(cli)
            .arg("-S")
            .arg("-s")
            .arg(&our_sec)
            .arg("-m")
            .arg(&data_path)
            .arg("-t")
            .arg("cli, our key"));
        let keys = TrustedKeys::new().with("ours", "ours.pub", ours.public_key().clone());
        assert_eq!(verify(&keys, DATA, &read(&sig_path)).unwrap().trusted_comment, "cli, our key");
    }
}

//! Library checksums.

use sha2::{Digest, Sha256};

/// The sha256 of `bytes` as 64 lower-case hex digits (what `sha256sum` prints and what
/// `artifact.sha256` holds).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_of(&Sha256::digest(bytes))
}

/// A sha256 computed over bytes given piece by piece (a library hashed while it is copied).
#[derive(Debug, Clone, Default)]
pub struct Sha256Stream(Sha256);

impl Sha256Stream {
    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The sha256 of every byte given, as [`sha256_hex`] prints it.
    pub fn finish_hex(self) -> String {
        hex_of(&self.0.finalize())
    }
}

fn hex_of(digest: &[u8]) -> String {
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

/// True for 64 lower-case hex digits.
pub(crate) fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(is_sha256_hex(&sha256_hex(b"x")));
        let mut stream = Sha256Stream::default();
        stream.update(b"a");
        stream.update(b"bc");
        assert_eq!(stream.finish_hex(), sha256_hex(b"abc"));
        assert!(!is_sha256_hex(&sha256_hex(b"x").to_uppercase()));
    }
}

//! HTTP authentication: the MCP server as an OAuth 2.1 protected resource (MCP authorization
//! spec, RFC 9728 protected resource metadata). Accepts `Authorization: Bearer` tokens that are
//! either one of the configured static tokens (kept as sha256 hashes, compared in constant time)
//! or a JWT signed by a key of the configured JWKS file with the configured issuer and audience.
//! The result is a [`Principal`]: who is calling, which selects the session's profile.
//!
//! A JWT's signature is checked once per token, not once per request: a verified token is
//! remembered (by its SHA-256) with its subject and its `exp`/`nbf`, and a later request with the
//! same token is accepted from that record while the token is within its validity (the same
//! leeway as the full check); past it, the full check runs again and refuses it with the same
//! answer. Only accepted tokens are remembered, at most [`VERIFIED_TOKENS`] at once.
//!
//! What this module does not do: issue tokens, talk to an authorization server, or refresh the
//! JWKS (the file is read at start; rotate keys by updating it and restarting).

use std::collections::HashMap;
use std::sync::Mutex;

use jsonwebtoken::{Algorithm, DecodingKey, Validation, jwk::JwkSet};
use quiver_manifest::{AuthConfig, sha256_hex};
use subtle::ConstantTimeEq;

/// Who is calling, as authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's principal, or the JWT's `sub`.
    pub name: String,
    /// The profile bound to the credential (a static token's `profile`), if any.
    pub profile: Option<String>,
    /// `token` or `jwt`.
    pub method: &'static str,
}

/// Why a request was not authenticated (the `error` of `WWW-Authenticate`, RFC 6750).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// No credentials were sent.
    Missing,
    /// Credentials were sent but are not valid (unknown token, bad signature, wrong issuer or
    /// audience, expired). The reason is logged, never sent to the client.
    Invalid(String),
}

struct StaticToken {
    principal: String,
    sha256: String,
    profile: Option<String>,
}

struct JwtCheck {
    keys: JwkSet,
    issuer: String,
    audience: String,
    leeway: u64,
    /// Tokens whose signature and claims were checked: SHA-256 of the token → what it proved.
    verified: Mutex<HashMap<String, Verified>>,
}

/// Most verified JWTs remembered at once (the expired ones are dropped when it is reached, and
/// all of them if none has expired).
pub const VERIFIED_TOKENS: usize = 1024;

/// What a verified JWT proved, and until when.
struct Verified {
    sub: String,
    /// `exp`, seconds since the epoch.
    exp: u64,
    /// `nbf`, when the token has one.
    nbf: Option<u64>,
}

impl Verified {
    /// Within the token's validity at `now`, as the full check reads it (`exp` and `nbf` with
    /// the configured leeway).
    fn valid_at(&self, now: u64, leeway: u64) -> bool {
        self.exp >= now.saturating_sub(leeway) && self.nbf.is_none_or(|nbf| nbf <= now + leeway)
    }
}

/// The configured credentials.
pub struct Authenticator {
    tokens: Vec<StaticToken>,
    jwt: Option<JwtCheck>,
    /// The protected resource metadata document (RFC 9728).
    pub(crate) metadata: serde_json::Value,
    /// This server's resource URI, when configured.
    pub(crate) resource: Option<String>,
    /// Principals allowed on the operator endpoints (`server.auth.operators`).
    operators: Vec<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens.len())
            .field("jwt", &self.jwt.as_ref().map(|j| &j.issuer))
            .finish_non_exhaustive()
    }
}

/// The asymmetric algorithms accepted for JWTs. HMAC (`HS*`) is refused: a JWKS holds public
/// keys, and a symmetric key there would let anyone who can read it mint tokens.
const JWT_ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

impl Authenticator {
    /// Builds the authenticator of `server.auth`; `jwks_text` is the content of `jwt.jwks_file`
    /// (read by the caller).
    pub fn new(auth: &AuthConfig, jwks_text: Option<&str>) -> Result<Authenticator, String> {
        let jwt = match (&auth.jwt, jwks_text) {
            (Some(cfg), Some(text)) => {
                let keys: JwkSet = serde_json::from_str(text).map_err(|e| {
                    format!("server.auth.jwt.jwks_file {}: not a JSON Web Key Set: {e}", cfg.jwks_file.display())
                })?;
                if keys.keys.is_empty() {
                    return Err(format!("server.auth.jwt.jwks_file {}: the key set is empty", cfg.jwks_file.display()));
                }
                for k in &keys.keys {
                    DecodingKey::from_jwk(k).map_err(|e| {
                        format!("server.auth.jwt.jwks_file {}: a key cannot be used: {e}", cfg.jwks_file.display())
                    })?;
                }
                Some(JwtCheck {
                    keys,
                    issuer: cfg.issuer.clone(),
                    audience: cfg.audience.clone(),
                    leeway: cfg.leeway_s,
                    verified: Mutex::new(HashMap::new()),
                })
            }
            (Some(cfg), None) => {
                return Err(format!("server.auth.jwt.jwks_file {} was not read", cfg.jwks_file.display()));
            }
            (None, _) => None,
        };
        let resource = auth.resource.clone().or_else(|| auth.jwt.as_ref().map(|j| j.audience.clone()));
        let mut metadata = serde_json::json!({
            "authorization_servers": auth.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "Quiver MCP server",
        });
        if let Some(r) = &resource {
            metadata["resource"] = serde_json::Value::String(r.clone());
        }
        Ok(Authenticator {
            tokens: auth
                .tokens
                .iter()
                .map(|t| StaticToken {
                    principal: t.principal.clone(),
                    sha256: t.sha256.to_ascii_lowercase(),
                    profile: t.profile.clone(),
                })
                .collect(),
            jwt,
            metadata,
            resource,
            operators: auth.operators.clone(),
        })
    }

    /// True when `principal` may read the operator endpoints (`server.auth.operators`).
    pub fn is_operator(&self, principal: &Principal) -> bool {
        self.operators.contains(&principal.name)
    }

    /// Checks the value of an `Authorization` header.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Principal, AuthFailure> {
        let Some(value) = authorization else { return Err(AuthFailure::Missing) };
        let Some((scheme, token)) = value.trim().split_once(' ') else {
            return Err(AuthFailure::Invalid("the Authorization header is not `Bearer TOKEN`".into()));
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Invalid(format!("unsupported authorization scheme `{scheme}`")));
        }
        let token = token.trim();
        if token.is_empty() || token.len() > 16 * 1024 {
            return Err(AuthFailure::Invalid("empty or oversized bearer token".into()));
        }
        if let Some(p) = self.static_token(token) {
            return Ok(p);
        }
        match &self.jwt {
            Some(jwt) if token.matches('.').count() == 2 => jwt.check(token),
            _ => Err(AuthFailure::Invalid("unknown bearer token".into())),
        }
    }

    /// Compares the token's hash with every configured hash, in constant time and without
    /// stopping at a match, so timing tells nothing about which (or whether) one matched.
    fn static_token(&self, token: &str) -> Option<Principal> {
        let presented = sha256_hex(token.as_bytes());
        let mut found: Option<&StaticToken> = None;
        for t in &self.tokens {
            let equal: bool = presented.as_bytes().ct_eq(t.sha256.as_bytes()).into();
            if equal && found.is_none() {
                found = Some(t);
            }
        }
        found.map(|t| Principal { name: t.principal.clone(), profile: t.profile.clone(), method: "token" })
    }
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
    /// Read as numbers of any kind, as the validation does (a fractional `exp` is accepted).
    exp: Option<f64>,
    nbf: Option<f64>,
}

impl JwtCheck {
    /// A token verified before and still valid is accepted without checking its signature
    /// again; anything else takes the full check ([`JwtCheck::verify`]).
    fn check(&self, token: &str) -> Result<Principal, AuthFailure> {
        let digest = sha256_hex(token.as_bytes());
        let now = jsonwebtoken::get_current_timestamp();
        {
            let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            match verified.get(&digest) {
                Some(v) if v.valid_at(now, self.leeway) => {
                    return Ok(Principal { name: v.sub.clone(), profile: None, method: "jwt" });
                }
                Some(_) => {
                    verified.remove(&digest);
                }
                None => {}
            }
        }
        let claims = self.verify(token)?;
        if let Some(exp) = claims.exp.filter(|e| e.is_finite() && *e >= 0.0) {
            let record = Verified {
                sub: claims.sub.clone(),
                exp: exp as u64,
                nbf: claims.nbf.filter(|n| n.is_finite()).map(|n| n.max(0.0).ceil() as u64),
            };
            let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if verified.len() >= VERIFIED_TOKENS {
                let leeway = self.leeway;
                verified.retain(|_, v| v.valid_at(now, leeway));
                if verified.len() >= VERIFIED_TOKENS {
                    verified.clear();
                }
            }
            verified.insert(digest, record);
        }
        Ok(Principal { name: claims.sub, profile: None, method: "jwt" })
    }

    /// The full check: header, key, signature, issuer, audience, expiry, not-before, subject.
    fn verify(&self, token: &str) -> Result<Claims, AuthFailure> {
        let invalid = |why: String| AuthFailure::Invalid(why);
        let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(format!("unreadable JWT header: {e}")))?;
        if !JWT_ALGORITHMS.contains(&header.alg) {
            return Err(invalid(format!("JWT algorithm {:?} is not accepted", header.alg)));
        }
        let jwk = match &header.kid {
            Some(kid) => self.keys.find(kid),
            None if self.keys.keys.len() == 1 => self.keys.keys.first(),
            None => None,
        }
        .ok_or_else(|| invalid("the JWT's key id is not in the configured key set".into()))?;
        let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(format!("unusable key: {e}")))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = self.leeway;
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| invalid(format!("JWT refused: {e}")))?;
        Ok(data.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_manifest::BearerToken;

    fn auth_with_token(token: &str) -> Authenticator {
        let cfg = AuthConfig {
            tokens: vec![BearerToken {
                principal: "ci".into(),
                sha256: sha256_hex(token.as_bytes()),
                profile: Some("plan".into()),
            }],
            ..AuthConfig::default()
        };
        Authenticator::new(&cfg, None).unwrap()
    }

    #[test]
    fn static_tokens_by_hash() {
        let a = auth_with_token("s3cret");
        let p = a.authenticate(Some("Bearer s3cret")).unwrap();
        assert_eq!((p.name.as_str(), p.profile.as_deref(), p.method), ("ci", Some("plan"), "token"));
        assert_eq!(a.authenticate(Some("bearer   s3cret ")).unwrap().name, "ci");
        assert_eq!(a.authenticate(None), Err(AuthFailure::Missing));
        for bad in ["Bearer s3cre", "Bearer S3CRET", "Basic czNjcmV0", "s3cret", "Bearer ", &"Bearer x".repeat(5000)] {
            assert!(matches!(a.authenticate(Some(bad)), Err(AuthFailure::Invalid(_))), "{bad:.40}");
        }
        // The hash, presented as a token, is not the token.
        let hash = sha256_hex(b"s3cret");
        assert!(a.authenticate(Some(&format!("Bearer {hash}"))).is_err());
    }

    const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    fn b64_decode(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in text.trim().bytes().filter(|c| *c != b'=') {
            let v = B64.iter().position(|b| *b == c).expect("base64") as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }

    fn b64url(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().fold(0u32, |a, b| (a << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                let c = B64[((n >> (18 - 6 * i)) & 63) as usize];
                out.push(match c {
                    b'+' => '-',
                    b'/' => '_',
                    c => c as char,
                });
            }
        }
        out
    }

    /// An Ed25519 key pair (made by minisign, whose secret key holds the seed) as a PKCS#8
    /// signing key and a JWKS.
    fn ed25519_jwt_key(kid: &str) -> (jsonwebtoken::EncodingKey, String) {
        let pair = quiver_manifest::KeyPair::generate();
        let secret = b64_decode(pair.secret_key_text().lines().nth(1).unwrap());
        let seed = &secret[62..94];
        let public = &b64_decode(pair.public_key().to_base64())[10..42];
        let mut pkcs8 =
            vec![0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
        pkcs8.extend_from_slice(seed);
        let jwks = serde_json::json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": kid, "x": b64url(public)}]});
        (jsonwebtoken::EncodingKey::from_ed_der(&pkcs8), jwks.to_string())
    }

    /// An authenticator taking JWTs of the test issuer and audience, with no leeway.
    fn jwt_authenticator(jwks: &str) -> Authenticator {
        let cfg = AuthConfig {
            jwt: Some(quiver_manifest::JwtConfig {
                issuer: "https://issuer.example".into(),
                audience: "https://quiver.example/mcp".into(),
                jwks_file: "jwks.json".into(),
                leeway_s: 0,
            }),
            ..AuthConfig::default()
        };
        Authenticator::new(&cfg, Some(jwks)).unwrap()
    }

    /// `claims` signed with `key` under key id `k1`.
    fn sign_jwt(key: &jsonwebtoken::EncodingKey, claims: &serde_json::Value) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::EdDSA);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    #[test]
    fn jwts_are_checked_for_key_issuer_audience_and_expiry() {
        let (key, jwks) = ed25519_jwt_key("k1");
        let (other_key, _) = ed25519_jwt_key("k1");
        let auth = jwt_authenticator(&jwks);
        let now = jsonwebtoken::get_current_timestamp();
        let token =
            |key: &jsonwebtoken::EncodingKey, claims: serde_json::Value| format!("Bearer {}", sign_jwt(key, &claims));
        let good = serde_json::json!({"sub": "alice", "iss": "https://issuer.example", "aud": "https://quiver.example/mcp", "exp": now + 300});
        let p = auth.authenticate(Some(&token(&key, good.clone()))).unwrap();
        assert_eq!((p.name.as_str(), p.method), ("alice", "jwt"));
        let mut cases = vec![("other key", token(&other_key, good.clone()))];
        for (label, field, value) in [
            ("wrong issuer", "iss", serde_json::json!("https://evil.example")),
            ("wrong audience", "aud", serde_json::json!("https://other.example/mcp")),
            ("expired", "exp", serde_json::json!(now - 600)),
        ] {
            let mut claims = good.clone();
            claims[field] = value;
            cases.push((label, token(&key, claims)));
        }
        let mut no_sub = good.clone();
        no_sub.as_object_mut().unwrap().remove("sub");
        cases.push(("no subject", token(&key, no_sub)));
        // A symmetric token (HS256) is refused whatever its secret: JWKS keys are public.
        let hs = jsonwebtoken::encode(
            &jsonwebtoken::Header::new(Algorithm::HS256),
            &good,
            &jsonwebtoken::EncodingKey::from_secret(b"guess"),
        )
        .unwrap();
        cases.push(("HS256", format!("Bearer {hs}")));
        for (label, t) in cases {
            assert!(matches!(auth.authenticate(Some(&t)), Err(AuthFailure::Invalid(_))), "{label}");
        }
    }

    /// A JWT's signature is checked once: the token is remembered with its subject and expiry,
    /// an expired one is refused even when remembered, and the record stays bounded.
    #[test]
    fn a_verified_jwt_is_remembered_until_it_expires() {
        let (key, jwks) = ed25519_jwt_key("k1");
        let (other_key, _) = ed25519_jwt_key("k1");
        let auth = jwt_authenticator(&jwks);
        let jwt = auth.jwt.as_ref().unwrap();
        let remembered = || jwt.verified.lock().unwrap().len();
        let now = jsonwebtoken::get_current_timestamp();
        let sign = |key: &jsonwebtoken::EncodingKey, claims: serde_json::Value| sign_jwt(key, &claims);
        let claims = |sub: &str, exp: u64| serde_json::json!({"sub": sub, "iss": "https://issuer.example", "aud": "https://quiver.example/mcp", "exp": exp});

        let good = sign(&key, claims("alice", now + 300));
        for _ in 0..3 {
            let p = auth.authenticate(Some(&format!("Bearer {good}"))).unwrap();
            assert_eq!((p.name.as_str(), p.profile.as_deref(), p.method), ("alice", None, "jwt"));
        }
        assert_eq!(remembered(), 1, "one record for one token, however often it is sent");
        // The same claims signed by a key not in the set: other bytes, checked on their own.
        let forged = sign(&other_key, claims("alice", now + 300));
        assert!(matches!(auth.authenticate(Some(&format!("Bearer {forged}"))), Err(AuthFailure::Invalid(_))));
        assert_eq!(remembered(), 1, "refused tokens are not remembered");

        // A token remembered once but expired since is refused by the full check, and forgotten.
        let expired = sign(&key, claims("bob", now - 600));
        jwt.verified
            .lock()
            .unwrap()
            .insert(sha256_hex(expired.as_bytes()), Verified { sub: "bob".into(), exp: now - 600, nbf: None });
        let refused = auth.authenticate(Some(&format!("Bearer {expired}")));
        assert!(matches!(&refused, Err(AuthFailure::Invalid(why)) if why.contains("JWT refused")), "{refused:?}");
        assert_eq!(remembered(), 1);

        // Bounded: at the cap, expired records make room.
        {
            let mut verified = jwt.verified.lock().unwrap();
            for i in 0..VERIFIED_TOKENS {
                verified.insert(format!("old-{i}"), Verified { sub: "x".into(), exp: now - 600, nbf: None });
            }
        }
        let fresh = sign(&key, claims("carol", now + 300));
        assert_eq!(auth.authenticate(Some(&format!("Bearer {fresh}"))).unwrap().name, "carol");
        assert_eq!(remembered(), 2, "alice's and carol's tokens; the expired records are gone");
    }

    #[test]
    fn jwks_must_be_usable() {
        let cfg = AuthConfig {
            jwt: Some(quiver_manifest::JwtConfig {
                issuer: "https://issuer".into(),
                audience: "https://quiver/mcp".into(),
                jwks_file: "jwks.json".into(),
                leeway_s: 0,
            }),
            ..AuthConfig::default()
        };
        assert!(Authenticator::new(&cfg, Some("{}")).unwrap_err().contains("not a JSON Web Key Set"));
        assert!(Authenticator::new(&cfg, Some(r#"{"keys": []}"#)).unwrap_err().contains("empty"));
        assert!(Authenticator::new(&cfg, None).is_err());
    }
}

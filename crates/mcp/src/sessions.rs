//! The session store: what a session needs to resume on a reconnect, after a restart or on
//! another instance, kept in memory (this process), in files (`<state_dir>/sessions`) or in
//! Redis/Valkey (shared by several `quiver serve --http` instances behind a load balancer).
//!
//! Two records per session, written by two parties, so neither ever overwrites the other:
//! - the **state** ([`StoredSession`]): who opened it (principal), its profile, client name,
//!   Quiver's session id and its loaded set ([`SessionSnapshot`]); written by the session when
//!   it starts and whenever its loaded set changes, before the answer that changed it, so the
//!   client's next request finds it wherever it lands;
//! - the **handshake**: the client's `initialize` parameters, which `rmcp` writes after the
//!   handshake and reads back ([`RmcpStore`]) to replay `initialize` on an instance that does not
//!   know the session id; Quiver's `initialize` then sees the restore marker and resumes from
//!   the state record.
//!
//! Records expire after `sessions.ttl_ms` without a write (Redis `PX`; files and memory check
//! their age on read). This module does no retries: a store that cannot be reached fails the
//! write (logged by the caller) and the session goes on with its state in memory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use quiver_catalog::SessionSnapshot;
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStoreError};
use serde::{Deserialize, Serialize};

/// The `_meta` key of `initialize` with which a stdio client names the session it resumes
/// (the same as `quiver serve --resume KEY`).
pub const SESSION_META_KEY: &str = "io.github.quiver/session";

/// Most records the in-memory store keeps (two per session); beyond, the oldest goes.
const MAX_MEMORY_RECORDS: usize = 20_000;

/// Longest session key a client may choose.
pub const MAX_SESSION_KEY_LEN: usize = 128;

/// What is kept of a session so it can resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSession {
    /// Quiver's id of the session (transcripts, rate limits, results); kept on resume.
    pub id: String,
    /// The principal that opened it; a resume by anyone else is refused.
    pub principal: Option<String>,
    /// The profile it ran under.
    pub profile: String,
    /// The client's self-declared name.
    pub client: String,
    /// Its loaded set.
    #[serde(default)]
    pub snapshot: SessionSnapshot,
    /// Counts the writes of this record: an instance holding an older revision of a session
    /// another instance changed reloads it (see [`SessionStore::is_shared`]).
    #[serde(default)]
    pub rev: u64,
}

/// A session store could not be used.
#[derive(Debug)]
pub struct StoreError(String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

fn err(what: impl std::fmt::Display) -> StoreError {
    StoreError(what.to_string())
}

/// Which record of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    State,
    Handshake,
}

impl Kind {
    fn suffix(self) -> &'static str {
        match self {
            Kind::State => "state",
            Kind::Handshake => "init",
        }
    }
}

/// The session store (`sessions.store` in `quiver.yaml`).
pub struct SessionStore {
    backend: Backend,
    ttl: Duration,
}

enum Backend {
    Memory(Mutex<HashMap<(String, Kind), (Instant, String)>>),
    File(PathBuf),
    Redis(Box<Redis>),
}

struct Redis {
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    url: String,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore").field("kind", &self.describe()).field("ttl", &self.ttl).finish()
    }
}

/// True when `key` may name a session: 1 to [`MAX_SESSION_KEY_LEN`] characters of
/// `[A-Za-z0-9_.-]` (it becomes a file name or a Redis key).
pub fn valid_session_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_SESSION_KEY_LEN
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && key != "."
        && key != ".."
}

impl SessionStore {
    /// A store in this process's memory.
    pub fn memory(ttl: Duration) -> SessionStore {
        SessionStore { backend: Backend::Memory(Mutex::new(HashMap::new())), ttl }
    }

    /// A store of one file per record in `dir` (created when first written).
    pub fn file(dir: PathBuf, ttl: Duration) -> SessionStore {
        SessionStore { backend: Backend::File(dir), ttl }
    }

    /// A store in Redis or Valkey at `url` (`redis://`, `valkey://`, `redis+unix://`). The
    /// connection is opened on first use and again after a failure.
    pub fn redis(url: &str, ttl: Duration) -> Result<SessionStore, StoreError> {
        let normalized = match url.strip_prefix("valkey://") {
            Some(rest) => format!("redis://{rest}"),
            None => url.to_owned(),
        };
        let client = redis::Client::open(normalized.as_str())
            .map_err(|e| err(format!("sessions.store: `{}` is not a usable Redis URL: {e}", redact(url))))?;
        Ok(SessionStore {
            backend: Backend::Redis(Box::new(Redis { client, conn: tokio::sync::Mutex::new(None), url: redact(url) })),
            ttl,
        })
    }

    /// The store a `sessions.store` value names (`file` under `state_dir`).
    pub fn from_config(store: &str, ttl: Duration, state_dir: &std::path::Path) -> Result<SessionStore, StoreError> {
        match store {
            "memory" => Ok(SessionStore::memory(ttl)),
            "file" => Ok(SessionStore::file(state_dir.join("sessions"), ttl)),
            url => SessionStore::redis(url, ttl),
        }
    }

    /// How long a record lives without a write.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True for the in-memory store (nothing survives this process).
    pub fn is_memory(&self) -> bool {
        matches!(self.backend, Backend::Memory(_))
    }

    /// True when other instances may change the records meanwhile (Redis): a live session then
    /// reads its record before each request that depends on its loaded set.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Redis(_))
    }

    /// `memory`, `file:DIR` or the Redis URL without its password, for logs.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Memory(_) => "memory".to_owned(),
            Backend::File(dir) => format!("file:{}", dir.display()),
            Backend::Redis(r) => r.url.clone(),
        }
    }

    /// Removes the records that expired (files: those not written for the lifetime; Redis
    /// expires its own). Returns how many were removed. Run at start: a file store only
    /// notices an expired record when someone asks for it.
    pub fn sweep(&self) -> usize {
        let Backend::File(dir) = &self.backend else { return 0 };
        let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
        let mut removed = 0;
        for entry in entries.flatten() {
            let expired = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() > self.ttl);
            let ours = entry.file_name().to_string_lossy().ends_with(".json");
            if expired && ours && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Checks that the store answers (Redis: `PING`), for a clear error at start.
    pub async fn check(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Redis(_) => {
                let mut conn = self.redis_conn().await?;
                let pong: String = redis::cmd("PING").query_async(&mut conn).await.map_err(|e| self.redis_failed(e))?;
                if pong == "PONG" { Ok(()) } else { Err(err(format!("unexpected PING answer {pong:?}"))) }
            }
            _ => Ok(()),
        }
    }

    /// The state record of session `id`, if any (and not expired).
    pub async fn load(&self, id: &str) -> Result<Option<StoredSession>, StoreError> {
        match self.get(id, Kind::State).await? {
            Some(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| err(format!("stored session {id} is unreadable ({e}); it is ignored"))),
            None => Ok(None),
        }
    }

    /// Writes the state record of session `id` (and restarts its lifetime).
    pub async fn save(&self, id: &str, session: &StoredSession) -> Result<(), StoreError> {
        let text = serde_json::to_string(session).map_err(err)?;
        self.put(id, Kind::State, text).await
    }

    /// Forgets session `id` (both records).
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        for kind in [Kind::State, Kind::Handshake] {
            self.remove(id, kind).await?;
        }
        Ok(())
    }

    fn redis_key(id: &str, kind: Kind) -> String {
        format!("quiver:session:{id}:{}", kind.suffix())
    }

    async fn redis_conn(&self) -> Result<redis::aio::MultiplexedConnection, StoreError> {
        let Backend::Redis(r) = &self.backend else {
            return Err(err("not a Redis store"));
        };
        let (client, conn) = (&r.client, &r.conn);
        let mut guard = conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let c = client.get_multiplexed_async_connection().await.map_err(|e| self.redis_failed(e))?;
        *guard = Some(c.clone());
        Ok(c)
    }

    /// A failed Redis command: the connection is dropped so the next use reconnects.
    fn redis_failed(&self, e: redis::RedisError) -> StoreError {
        if let Backend::Redis(r) = &self.backend {
            if let Ok(mut g) = r.conn.try_lock() {
                *g = None;
            }
            return err(format!("session store {}: {e}", r.url));
        }
        err(e)
    }

    fn file_path(dir: &std::path::Path, id: &str, kind: Kind) -> Result<PathBuf, StoreError> {
        if !valid_session_key(id) {
            return Err(err(format!("session id `{id}` cannot name a file")));
        }
        Ok(dir.join(format!("{id}.{}.json", kind.suffix())))
    }

    async fn get(&self, id: &str, kind: Kind) -> Result<Option<String>, StoreError> {
        match &self.backend {
            Backend::Memory(map) => {
                let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
                let key = (id.to_owned(), kind);
                match map.get(&key) {
                    Some((at, _)) if at.elapsed() > self.ttl => {
                        map.remove(&key);
                        Ok(None)
                    }
                    Some((_, v)) => Ok(Some(v.clone())),
                    None => Ok(None),
                }
            }
            Backend::File(dir) => {
                let path = SessionStore::file_path(dir, id, kind)?;
                let fresh = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .map(|t| SystemTime::now().duration_since(t).unwrap_or_default() <= self.ttl);
                match fresh {
                    Ok(true) => match std::fs::read_to_string(&path) {
                        Ok(t) => Ok(Some(t)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                        Err(e) => Err(err(format!("cannot read {}: {e}", path.display()))),
                    },
                    Ok(false) => {
                        let _ = std::fs::remove_file(&path);
                        Ok(None)
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(err(format!("cannot read {}: {e}", path.display()))),
                }
            }
            Backend::Redis(_) => {
                let mut conn = self.redis_conn().await?;
                redis::cmd("GET")
                    .arg(SessionStore::redis_key(id, kind))
                    .query_async::<Option<String>>(&mut conn)
                    .await
                    .map_err(|e| self.redis_failed(e))
            }
        }
    }

    async fn put(&self, id: &str, kind: Kind, text: String) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(map) => {
                let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
                let ttl = self.ttl;
                if map.len() >= MAX_MEMORY_RECORDS {
                    map.retain(|_, (at, _)| at.elapsed() <= ttl);
                }
                if map.len() >= MAX_MEMORY_RECORDS
                    && let Some(oldest) = map.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
                map.insert((id.to_owned(), kind), (Instant::now(), text));
                Ok(())
            }
            Backend::File(dir) => {
                let path = SessionStore::file_path(dir, id, kind)?;
                std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
                // Written whole then renamed, so a reader never sees half a record.
                let tmp = dir.join(format!(".{id}.{}.{}.tmp", kind.suffix(), std::process::id()));
                std::fs::write(&tmp, text.as_bytes())
                    .and_then(|()| std::fs::rename(&tmp, &path))
                    .map_err(|e| err(format!("cannot write {}: {e}", path.display())))
            }
            Backend::Redis(_) => {
                let mut conn = self.redis_conn().await?;
                let ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
                redis::cmd("SET")
                    .arg(SessionStore::redis_key(id, kind))
                    .arg(text)
                    .arg("PX")
                    .arg(ms)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(|e| self.redis_failed(e))
            }
        }
    }

    async fn remove(&self, id: &str, kind: Kind) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(map) => {
                map.lock().unwrap_or_else(|e| e.into_inner()).remove(&(id.to_owned(), kind));
                Ok(())
            }
            Backend::File(dir) => match std::fs::remove_file(SessionStore::file_path(dir, id, kind)?) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(err(e)),
            },
            Backend::Redis(_) => {
                let mut conn = self.redis_conn().await?;
                redis::cmd("DEL")
                    .arg(SessionStore::redis_key(id, kind))
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(|e| self.redis_failed(e))
            }
        }
    }
}

/// A URL with its password replaced by `***`, for logs and errors.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else { return url.to_owned() };
    let rest = &url[scheme_end..];
    match (rest.find('@'), rest.find('/')) {
        (Some(at), slash) if slash.is_none_or(|s| at < s) => {
            let creds = &rest[..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme_end], &rest[at..])
        }
        _ => url.to_owned(),
    }
}

/// The handshake records of a [`SessionStore`], as `rmcp`'s streamable HTTP service reads and
/// writes them (its cross-instance restore).
pub struct RmcpStore(pub std::sync::Arc<SessionStore>);

#[async_trait::async_trait]
impl rmcp::transport::streamable_http_server::session::SessionStore for RmcpStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        // Only sessions Quiver also knows are restored (their state record is written first).
        if self.0.get(session_id, Kind::State).await?.is_none() {
            return Ok(None);
        }
        match self.0.get(session_id, Kind::Handshake).await? {
            Some(text) => Ok(Some(serde_json::from_str(&text)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let text = serde_json::to_string(state)?;
        Ok(self.0.put(session_id, Kind::Handshake, text).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.0.delete(session_id).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredSession {
        StoredSession {
            id: "mcp-7".into(),
            principal: Some("alice".into()),
            profile: "agent".into(),
            client: "c".into(),
            snapshot: SessionSnapshot { loaded: vec!["date_diff".into()], ..SessionSnapshot::default() },
            rev: 3,
        }
    }

    #[tokio::test]
    async fn memory_and_file_stores_keep_forget_and_expire_sessions() {
        let dir = tempfile::tempdir().unwrap();
        for store in [
            SessionStore::memory(Duration::from_secs(60)),
            SessionStore::file(dir.path().join("sessions"), Duration::from_secs(60)),
        ] {
            assert_eq!(store.load("k1").await.unwrap(), None);
            store.save("k1", &sample()).await.unwrap();
            assert_eq!(store.load("k1").await.unwrap(), Some(sample()));
            store.delete("k1").await.unwrap();
            assert_eq!(store.load("k1").await.unwrap(), None, "{}", store.describe());
        }
        let short = SessionStore::memory(Duration::from_millis(1));
        short.save("k", &sample()).await.unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(short.load("k").await.unwrap(), None, "an expired record is gone");
        let file = SessionStore::file(dir.path().join("s2"), Duration::from_secs(60));
        assert!(file.save("../escape", &sample()).await.is_err(), "a key that is not a file name is refused");
        file.save("old", &sample()).await.unwrap();
        assert_eq!(file.sweep(), 0, "a fresh record stays");
        let expiring = SessionStore::file(dir.path().join("s2"), Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(expiring.sweep(), 1, "an expired record is removed at start");
    }

    #[test]
    fn keys_and_urls() {
        assert!(valid_session_key("ci-run_42.a"));
        assert!(!valid_session_key("a/b") && !valid_session_key("..") && !valid_session_key(""));
        assert!(!valid_session_key(&"x".repeat(MAX_SESSION_KEY_LEN + 1)));
        assert_eq!(redact("redis://:hunter2@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        let store = SessionStore::from_config("valkey://:pw@127.0.0.1:1/0", Duration::from_secs(1), "/s".as_ref());
        assert_eq!(store.unwrap().describe(), "valkey://:***@127.0.0.1:1/0");
    }
}

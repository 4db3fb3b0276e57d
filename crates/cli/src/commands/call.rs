//! `quiver call TOOL --args JSON`: one call through the router, as a session of the chosen
//! profile would make it (typed lane, the profile's scopes and gates).

use anyhow::{Context, Result};
use clap::Args;
use quiver_abi::Status;
use quiver_mcp::SessionProfile;
use quiver_router::{Call, CallOutcome, Router};
use serde::Deserializer;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};

use crate::settings::Settings;
use crate::{GlobalArgs, Reported, UsageError};

#[derive(Debug, Args)]
pub struct CallArgs {
    /// Tool name (canonical or alias).
    pub tool: String,
    /// Arguments as a JSON object.
    #[arg(long = "args", value_name = "JSON", default_value = "{}")]
    pub arguments: String,
    /// Confirm the call: tools that need a person's confirmation run without asking.
    #[arg(long)]
    pub yes: bool,
    /// Profile whose scopes and gates apply [default: the configuration's default profile].
    #[arg(long, value_name = "NAME", env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
}

pub fn run(g: &GlobalArgs, a: &CallArgs) -> Result<()> {
    let arguments = parse_arguments(&a.arguments)?;
    if !arguments.is_object() {
        return Err(UsageError("--args must be a JSON object such as '{\"text\": \"hi\"}'".to_owned()).into());
    }
    let settings = Settings::load(g)?;
    let (profile_name, profile) = settings.profile(a.profile.as_deref())?;
    let host = settings.start_host()?;
    // No one can be asked from here (no elicitation): under `ask`, `--yes` confirms and
    // otherwise the router refuses; `deny` is final, `--yes` included.
    let caller = SessionProfile::from_config(&profile_name, &profile).caller(
        format!("cli-{}", std::process::id()),
        "quiver-cli",
        None,
    );
    let call = Call::new(&a.tool, arguments, caller).confirmed(a.yes);
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let router = Router::new(host, settings.router());
    let outcome = rt.block_on(router.call(call));
    router.flush_transcripts();
    print_outcome(g, &outcome);
    if outcome.response.status == Status::Error { Err(Reported.into()) } else { Ok(()) }
}

/// `--args` as JSON, refusing a key given twice in one object (serde_json would keep the last
/// value in silence).
fn parse_arguments(text: &str) -> Result<Value, UsageError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Unique { at: &mut String::new() }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| {
        if e.is_data() {
            // Only a repeated key is a data error here: the message says which and where.
            UsageError(format!("--args {e}; keep one of them"))
        } else {
            UsageError(format!("--args is not valid JSON ({e}); pass an object such as '{{\"text\": \"hi\"}}'"))
        }
    })
}

/// Deserializes a JSON value, failing on a key that appears twice in one object; `at` is the
/// JSON Pointer of the value being read.
struct Unique<'a> {
    at: &'a mut String,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let len = self.at.len();
            self.at.push_str(&format!("/{}", items.len()));
            let item = seq.next_element_seed(Unique { at: &mut *self.at })?;
            self.at.truncate(len);
            match item {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let at = if self.at.is_empty() { "/" } else { self.at.as_str() };
                return Err(serde::de::Error::custom(format!("names the key `{key}` twice in the object at `{at}`")));
            }
            let len = self.at.len();
            self.at.push('/');
            self.at.push_str(&key.replace('~', "~0").replace('/', "~1"));
            let value = map.next_value_seed(Unique { at: &mut *self.at })?;
            self.at.truncate(len);
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

fn print_outcome(g: &GlobalArgs, o: &CallOutcome) {
    let r = &o.response;
    if g.json {
        println!("{:#}", json!({ "response": r, "meta": o.meta }));
        return;
    }
    if let Some(n) = &o.meta.notice {
        eprintln!("notice: {}", n.message());
    }
    match r.status {
        Status::Error => {
            if let Some(e) = &r.error {
                eprintln!("error: {}: {}", e.code, e.message);
                if !e.details.is_null() {
                    eprintln!("details: {:#}", e.details);
                }
                if e.details.get("needs_confirmation") == Some(&Value::Bool(true))
                    && e.details.get("denied_by_profile").is_none()
                {
                    eprintln!("hint: this call needs a person's confirmation; run it again with --yes to confirm it");
                }
            }
        }
        Status::Ok | Status::Partial => {
            if r.status == Status::Partial {
                eprintln!("partial result");
            }
            match &r.outputs {
                Value::String(s) => println!("{s}"),
                // No structured result (upstream MCP tools often have none): the content blocks.
                Value::Null if !r.content.is_empty() => {
                    for block in &r.content {
                        match block.get("text").and_then(Value::as_str) {
                            Some(text) if block.get("type").and_then(Value::as_str) == Some("text") => {
                                println!("{text}")
                            }
                            _ => println!("{}", serde_json::to_string_pretty(block).unwrap_or_default()),
                        }
                    }
                }
                other => println!("{}", serde_json::to_string_pretty(other).unwrap_or_default()),
            }
        }
    }
    for obs in &r.observations {
        eprintln!("observation: {obs}");
    }
}

//! `quiver call TOOL --args JSON`: one call through the router, as a session of the chosen
//! profile would make it (typed lane, the profile's scopes and gates).

use anyhow::{Context, Result};
use clap::Args;
use quiver_abi::Status;
use quiver_mcp::SessionProfile;
use quiver_router::{Call, CallOutcome, Router};
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
    let arguments: Value = serde_json::from_str(&a.arguments).map_err(|e| {
        UsageError(format!("--args is not valid JSON ({e}); pass an object such as '{{\"text\": \"hi\"}}'"))
    })?;
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

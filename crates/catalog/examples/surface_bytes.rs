//! Prints the first-turn surface size per exposure mode for a tool list (e.g. the BFCL dev
//! catalog), every tool deferred, as Quiver would serve a large catalog.
//!
//! `cargo run --release -p quiver-catalog --example surface_bytes -- target/bfcl/tools.json`

use quiver_catalog::{Access, ExposureMode, Session, SurfacePolicy, catalog_from_tool_list};
use quiver_manifest::LifecycleState;

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "target/bfcl/tools.json".to_owned());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let tools: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let n = tools.len();
    let catalog =
        catalog_from_tool_list("external", tools, LifecycleState::Deferred).unwrap_or_else(|e| panic!("{path}: {e}"));
    println!("{n} tools from {path}, all deferred");
    println!("| mode | typed tools | meta tools | surface bytes |");
    println!("|---|---|---|---|");
    for mode in [ExposureMode::Lazy, ExposureMode::Hybrid, ExposureMode::Adaptive, ExposureMode::Full] {
        let s = Session::new("m", SurfacePolicy { mode, ..SurfacePolicy::default() }, Access::unrestricted());
        let surface = s.surface(&catalog);
        println!("| {} | {} | {} | {} |", mode.as_str(), surface.n_typed, surface.n_meta, surface.total_bytes);
    }
}

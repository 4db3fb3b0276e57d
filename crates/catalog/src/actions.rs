//! A consolidated tool's actions as its code declares them (`quiver_abi::actions!`, reported in
//! the plugin info) against the manifest's `actions` and action aliases. The manifest is what
//! the host enforces; a difference means the author changed one and not the other, so loading
//! fails with a message naming both sides and the fix.

use quiver_abi::ToolSchemas;
use quiver_manifest::ToolSpec;

/// Checks one tool; `Ok` when the library declares no actions (a hand-written schema) or they
/// agree with the manifest.
pub fn check_tool_actions(spec: &ToolSpec, derived: &ToolSchemas) -> Result<(), String> {
    if derived.actions.is_empty() {
        return Ok(());
    }
    let tool = &spec.name;
    let code: Vec<&str> = derived.actions.iter().map(|a| a.name.as_str()).collect();
    let manifest: Vec<&str> = spec.actions.iter().map(|a| a.name.as_str()).collect();
    let mut problems = Vec::new();
    for a in &derived.actions {
        let Some(m) = spec.actions.iter().find(|m| m.name == a.name) else {
            problems.push(format!(
                "action `{}` is in the code but not in tool.yaml: add `- {{name: {}, side_effects: {}}}` under `actions`",
                a.name, a.name, a.side_effects
            ));
            continue;
        };
        if m.side_effects.as_str() != a.side_effects {
            problems.push(format!(
                "action `{}` is `{}` in the code but `{}` in tool.yaml: make them agree",
                a.name,
                a.side_effects,
                m.side_effects.as_str()
            ));
        }
        if let Some(c) = a.confirmation
            && m.confirmation.is_some_and(|mc| mc != c)
        {
            problems.push(format!(
                "action `{}` has confirmation {c} in the code but {} in tool.yaml: make them agree",
                a.name, !c
            ));
        }
        for alias in &a.aliases {
            if !spec.aliases.iter().any(|x| &x.name == alias && x.action.as_deref() == Some(a.name.as_str())) {
                problems.push(format!(
                    "the code names alias `{alias}` for action `{}`, but tool.yaml has no alias `{alias}` with `action: {}`: add it under `aliases`",
                    a.name, a.name
                ));
            }
        }
    }
    for m in &manifest {
        if !code.contains(m) {
            problems.push(format!(
                "action `{m}` is in tool.yaml but not in the code: add it to the `actions!` enum or remove it from tool.yaml"
            ));
        }
    }
    for x in spec.aliases.iter().filter(|x| x.action.is_some()) {
        let action = x.action.as_deref().unwrap_or_default();
        if !derived.actions.iter().any(|a| a.name == action && a.aliases.contains(&x.name)) {
            problems.push(format!(
                "tool.yaml has alias `{}` for action `{action}`, which the code does not declare: add `aliases = [\"{}\"]` to that action",
                x.name, x.name
            ));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(format!("tool `{tool}`: {}", problems.join("; "))) }
}

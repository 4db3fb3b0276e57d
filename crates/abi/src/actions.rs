//! Consolidated tools: one tool, several actions, each with its own typed arguments.
//!
//! Write one argument struct per action and list them in [`crate::actions!`]:
//!
//! ```text
//! quiver_abi::actions! {
//!     /// Arguments of `notes`: one action and its fields.
//!     #[derive(Debug)]
//!     pub enum NotesInput {
//!         /// Add a note.
//!         #[action(name = "add", side_effects = "write")]
//!         Add(AddArgs),
//!         /// Delete a note for good.
//!         #[action(name = "delete", side_effects = "destructive", confirmation = true, aliases = ["delete_note"])]
//!         Delete(DeleteArgs),
//!     }
//! }
//! ```
//!
//! The enum is then an ordinary [`crate::Tool::Input`]. What the macro gives it:
//! - **One flat schema**, no `oneOf`: an object with a required string `action` (an `enum` of the
//!   action names, each described) and the union of every action's fields; a field is required
//!   at the top only when every action requires it, and each field's description says which
//!   actions take it. Models fill flat objects far more reliably than `oneOf` branches.
//! - **One schema per action** ([`ActionSchema::input_schema`]), reported to the host in
//!   [`crate::ToolSchemas::actions`] with the action's description, side effects, confirmation
//!   and aliases, so `cargo xtask contract-test` can check them against the manifest's `actions`
//!   and `aliases`, and error hints can quote the right excerpt.
//! - **Errors that name the action**: a missing `action`, an unknown one, or fields that do not
//!   fit the chosen action give `invalid_arguments` with the action's own field list (for
//!   example `action \`move\`: missing field \`to\` (move takes: path (required), to
//!   (required), overwrite)`).
//! - **Host-named actions**: when the host calls the tool through an action alias (a manifest
//!   alias with `action:`), the SDK fills `action` in before the arguments are read, and refuses
//!   arguments that name a different one.
//!
//! Side effects are one of `read`, `write`, `destructive`, `external` (as in the manifest); the
//! manifest stays the source of truth for policy, and `contract-test` fails when the two
//! disagree. Every argument struct should use `#[serde(deny_unknown_fields)]`; a field shared by
//! several actions should have the same type in each (the first one's schema is shown).

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::{ToolError, module::ActionSchema};

/// What the [`crate::actions!`] macro declares about one action.
#[derive(Debug, Clone)]
pub struct ActionDecl {
    /// The action name, the value of `action`.
    pub name: &'static str,
    /// What it does (the variant's doc comment).
    pub description: String,
    /// `read`, `write`, `destructive` or `external`.
    pub side_effects: &'static str,
    /// Whether a person must confirm it (`None`: the tool's policy).
    pub confirmation: Option<bool>,
    /// Tool-name aliases that call this action (manifest `aliases[]` with `action:`).
    pub aliases: &'static [&'static str],
}

/// An enum of actions made by [`crate::actions!`]. Not meant to be implemented by hand.
pub trait ActionSet: Sized {
    /// The declared actions, in declaration order.
    fn declarations() -> Vec<ActionDecl>;
    /// The schema of each action's own arguments (without `action`), in declaration order,
    /// generated with `generator` so shared definitions land in one place.
    fn argument_schemas(generator: &mut SchemaGenerator) -> Vec<Schema>;
    /// Reads the arguments of action `action` (already known to be one of the declared names).
    fn read(action: &str, args: Value) -> Result<Self, String>;
    /// The name of this value's action.
    fn action_name(&self) -> &'static str;
}

/// The marker key under which the merged schema carries the per-action schemas until
/// [`split_actions`] moves them out (never shown to a model).
const ACTIONS_KEY: &str = "x-quiver-actions";

fn property_list(schema: &Value) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return "no fields".to_owned() };
    let mut names: Vec<String> = props
        .keys()
        .map(|k| if required.contains(&k.as_str()) { format!("{k} (required)") } else { k.clone() })
        .collect();
    // Required fields first, as a model should write them.
    names.sort_by_key(|n| !n.ends_with("(required)"));
    names.join(", ")
}

/// Reads an action enum from call arguments (used by the `Deserialize` the macro writes).
pub fn parse<A: ActionSet>(args: Value) -> Result<A, String> {
    let decls = A::declarations();
    let names: Vec<&str> = decls.iter().map(|d| d.name).collect();
    let Value::Object(mut map) = args else {
        return Err(format!("arguments must be an object with `action` (one of {})", names.join(", ")));
    };
    let action = match map.remove("action") {
        Some(Value::String(a)) => a,
        Some(other) => return Err(format!("`action` must be a string, one of {}; got {other}", names.join(", "))),
        None => return Err(format!("pass `action`: one of {}", names.join(", "))),
    };
    let Some(decl) = decls.iter().find(|d| d.name == action) else {
        let alias_of = decls.iter().find(|d| d.aliases.contains(&action.as_str()));
        return Err(match alias_of {
            Some(d) => format!("unknown action `{action}`: `{action}` is a tool name; write `action: {}`", d.name),
            None => format!("unknown action `{action}`: use one of {}", names.join(", ")),
        });
    };
    A::read(decl.name, Value::Object(map)).map_err(|e| {
        let mut generator = SchemaGenerator::default();
        let at = decls.iter().position(|d| d.name == decl.name).unwrap_or(0);
        let schema = A::argument_schemas(&mut generator).into_iter().nth(at).map(Schema::to_value).unwrap_or_default();
        format!("action `{}`: {e} ({} takes: {})", decl.name, decl.name, property_list(&schema))
    })
}

/// The flat schema of an action enum (used by the `JsonSchema` the macro writes).
pub fn merged_schema<A: ActionSet>(generator: &mut SchemaGenerator) -> Schema {
    let decls = A::declarations();
    let schemas: Vec<Value> = A::argument_schemas(generator).into_iter().map(Schema::to_value).collect();
    let mut properties = Map::new();
    let mut users: Vec<(String, Vec<&str>)> = Vec::new();
    let mut required_by_all: Option<Vec<String>> = None;
    for (decl, schema) in decls.iter().zip(&schemas) {
        let required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        required_by_all = Some(match required_by_all {
            None => required.clone(),
            Some(all) => all.into_iter().filter(|r| required.contains(r)).collect(),
        });
        for (key, prop) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
            properties.entry(key.clone()).or_insert_with(|| prop.clone());
            match users.iter_mut().find(|(k, _)| k == key) {
                Some((_, list)) => list.push(decl.name),
                None => users.push((key.clone(), vec![decl.name])),
            }
        }
    }
    // Say which actions take a field that not all of them take.
    for (key, list) in &users {
        if list.len() < decls.len()
            && let Some(Value::Object(prop)) = properties.get_mut(key)
        {
            let only = format!("Only for {}.", list.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", "));
            let text = match prop.get("description").and_then(Value::as_str) {
                Some(d) => format!("{only} {d}"),
                None => only,
            };
            prop.insert("description".to_owned(), Value::String(text));
        }
    }
    let described: Vec<String> = decls
        .iter()
        .map(|d| {
            if d.description.is_empty() { format!("`{}`", d.name) } else { format!("`{}`: {}", d.name, d.description) }
        })
        .collect();
    properties.insert(
        "action".to_owned(),
        serde_json::json!({
            "type": "string",
            "enum": decls.iter().map(|d| d.name).collect::<Vec<_>>(),
            "description": format!("What to do. {}", described.join(" ")),
        }),
    );
    let mut required = vec![Value::String("action".to_owned())];
    required.extend(required_by_all.unwrap_or_default().into_iter().map(Value::String));
    let actions: Vec<Value> = decls
        .iter()
        .zip(schemas)
        .map(|(d, mut schema)| {
            if let Value::Object(obj) = &mut schema {
                if let Some(Value::Object(props)) = obj.get_mut("properties") {
                    props.insert("action".to_owned(), serde_json::json!({ "const": d.name }));
                }
                match obj.get_mut("required") {
                    Some(Value::Array(r)) => r.insert(0, Value::String("action".to_owned())),
                    _ => {
                        obj.insert("required".to_owned(), serde_json::json!(["action"]));
                    }
                }
            }
            serde_json::to_value(ActionSchema {
                name: d.name.to_owned(),
                description: d.description.clone(),
                side_effects: d.side_effects.to_owned(),
                confirmation: d.confirmation,
                aliases: d.aliases.iter().map(|a| (*a).to_owned()).collect(),
                input_schema: schema,
            })
            .unwrap_or_default()
        })
        .collect();
    let mut out = Map::new();
    out.insert("type".to_owned(), Value::String("object".to_owned()));
    out.insert("properties".to_owned(), Value::Object(properties));
    out.insert("required".to_owned(), Value::Array(required));
    out.insert("additionalProperties".to_owned(), Value::Bool(false));
    out.insert(ACTIONS_KEY.to_owned(), Value::Array(actions));
    Schema::from(out)
}

/// Moves the per-action schemas out of a derived input schema: the schema a model sees, and
/// the actions (empty for a tool without actions). Per-action schemas get the root's `$defs`
/// when they refer to shared definitions.
pub fn split_actions(mut schema: Value) -> (Value, Vec<ActionSchema>) {
    let Some(Value::Array(raw)) = schema.as_object_mut().and_then(|o| o.remove(ACTIONS_KEY)) else {
        return (schema, Vec::new());
    };
    let defs = schema.get("$defs").cloned();
    let actions = raw
        .into_iter()
        .filter_map(|v| serde_json::from_value::<ActionSchema>(v).ok())
        .map(|mut a| {
            if let (Some(defs), Value::Object(o)) = (&defs, &mut a.input_schema) {
                o.insert("$defs".to_owned(), defs.clone());
            }
            a
        })
        .collect();
    (schema, actions)
}

/// Fills in `action` named by the host (an action alias) and refuses arguments naming another.
pub fn apply_host_action(inputs: &mut Value, host_action: &str) -> Result<(), ToolError> {
    if inputs.is_null() {
        *inputs = Value::Object(Map::new());
    }
    let Value::Object(map) = inputs else { return Ok(()) };
    match map.get("action") {
        None => {
            map.insert("action".to_owned(), Value::String(host_action.to_owned()));
            Ok(())
        }
        Some(Value::String(a)) if a == host_action => Ok(()),
        Some(given) => Err(ToolError::invalid(format!(
            "the arguments say action {given} but the call was made for action `{host_action}`; make them agree"
        ))),
    }
}

/// The schema of one action's argument type, inline (used by the macro).
#[doc(hidden)]
pub fn argument_schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// Reads one action's arguments (used by the macro).
#[doc(hidden)]
pub fn read_arguments<T: DeserializeOwned>(args: Value) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| e.to_string())
}

/// Joins doc-comment lines into one description (used by the macro).
#[doc(hidden)]
pub fn doc_text(lines: &[&str]) -> String {
    lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Declares an enum of actions for a consolidated tool; see [`crate::actions`].
#[macro_export]
macro_rules! actions {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[action(name = $action:literal, side_effects = $effects:literal
                    $(, confirmation = $confirmation:literal)?
                    $(, aliases = [$($alias:literal),* $(,)?])? $(,)?)]
                $variant:ident($args:ty)
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $(
                $(#[doc = $doc])*
                $variant($args),
            )+
        }

        impl $crate::actions::ActionSet for $name {
            fn declarations() -> ::std::vec::Vec<$crate::actions::ActionDecl> {
                ::std::vec![$(
                    $crate::actions::ActionDecl {
                        name: $action,
                        description: $crate::actions::doc_text(&[$($doc),*]),
                        side_effects: $effects,
                        confirmation: { let _c: ::std::option::Option<bool> = None; $(let _c = Some($confirmation);)? _c },
                        aliases: &[$($($alias),*)?],
                    },
                )+]
            }
            fn argument_schemas(
                generator: &mut $crate::schemars::SchemaGenerator,
            ) -> ::std::vec::Vec<$crate::schemars::Schema> {
                ::std::vec![$($crate::actions::argument_schema::<$args>(generator)),+]
            }
            fn read(action: &str, args: $crate::serde_json::Value) -> ::std::result::Result<Self, ::std::string::String> {
                match action {
                    $($action => $crate::actions::read_arguments::<$args>(args).map($name::$variant),)+
                    other => Err(::std::format!("unknown action `{other}`")),
                }
            }
            fn action_name(&self) -> &'static str {
                match self {
                    $($name::$variant(_) => $action,)+
                }
            }
        }

        impl<'de> $crate::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let value = <$crate::serde_json::Value as $crate::serde::Deserialize>::deserialize(d)?;
                $crate::actions::parse::<$name>(value).map_err(<D::Error as $crate::serde::de::Error>::custom)
            }
        }

        impl $crate::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(::std::stringify!($name))
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(generator: &mut $crate::schemars::SchemaGenerator) -> $crate::schemars::Schema {
                $crate::actions::merged_schema::<$name>(generator)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Point {
        x: i32,
        y: i32,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct PlaceArgs {
        /// Where to put it.
        at: Point,
        #[serde(default)]
        label: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct ClearArgs {
        #[serde(default)]
        all: bool,
    }

    crate::actions! {
        #[derive(Debug, PartialEq)]
        enum Board {
            /// Put a marker on the board.
            #[action(name = "place", side_effects = "write")]
            Place(PlaceArgs),
            /// Wipe the board.
            /// Cannot be undone.
            #[action(name = "clear", side_effects = "destructive", confirmation = true, aliases = ["wipe", "reset"],)]
            Clear(ClearArgs),
        }
    }

    #[test]
    fn reads_each_action_into_its_variant() {
        let b: Board = serde_json::from_value(json!({"action": "place", "at": {"x": 1, "y": 2}})).unwrap();
        assert_eq!(b, Board::Place(PlaceArgs { at: Point { x: 1, y: 2 }, label: None }));
        assert_eq!(b.action_name(), "place");
        let b: Board = serde_json::from_value(json!({"action": "clear"})).unwrap();
        assert_eq!(b, Board::Clear(ClearArgs { all: false }));
        let e = serde_json::from_value::<Board>(json!({"action": "clear", "at": {"x": 1, "y": 2}})).unwrap_err();
        assert!(e.to_string().contains("unknown field `at`") && e.to_string().contains("clear takes: all"), "{e}");
        let e = serde_json::from_value::<Board>(json!({"action": "wipe"})).unwrap_err();
        assert!(e.to_string().contains("write `action: clear`"), "{e}");
        let e = serde_json::from_value::<Board>(json!(["place"])).unwrap_err();
        assert!(e.to_string().contains("object with `action`"), "{e}");
        let e = serde_json::from_value::<Board>(json!({"action": 3})).unwrap_err();
        assert!(e.to_string().contains("must be a string"), "{e}");
    }

    #[test]
    fn one_flat_schema_and_one_schema_per_action() {
        let (flat, actions) = split_actions(crate::sdk::schema_of::<Board>());
        assert!(actions.is_empty(), "schema_of already split them off");
        let (raw_flat, actions) = split_actions({
            let mut v = SchemaGenerator::default().into_root_schema_for::<Board>().to_value();
            v.as_object_mut().unwrap().remove("$schema");
            v.as_object_mut().unwrap().remove("title");
            v
        });
        assert_eq!(flat, raw_flat);
        assert_eq!(flat["required"], json!(["action"]), "no field is required by every action");
        assert_eq!(flat["properties"]["action"]["enum"], json!(["place", "clear"]));
        assert_eq!(flat["additionalProperties"], false);
        assert!(flat["properties"]["all"]["description"].as_str().unwrap().starts_with("Only for `clear`."));
        assert_eq!(flat["properties"]["at"]["description"], "Only for `place`. Where to put it.");
        // Point is a shared definition: referenced from the flat schema and carried by the action.
        assert!(flat["$defs"]["Point"].is_object(), "{flat:#}");
        let place = &actions[0];
        assert_eq!(place.input_schema["required"], json!(["action", "at"]));
        assert!(place.input_schema["$defs"]["Point"].is_object());
        let clear = &actions[1];
        assert_eq!(clear.description, "Wipe the board. Cannot be undone.");
        assert_eq!((clear.side_effects.as_str(), clear.confirmation), ("destructive", Some(true)));
        assert_eq!(clear.aliases, ["wipe", "reset"]);
        assert_eq!(actions[0].confirmation, None);
        // The flat schema accepts what each action accepts (checked with the action schemas'
        // own shape: every action property is in the flat one).
        for a in &actions {
            for key in a.input_schema["properties"].as_object().unwrap().keys() {
                assert!(flat["properties"].get(key).is_some(), "{key}");
            }
        }
    }

    #[test]
    fn host_named_actions_fill_in_or_conflict() {
        let mut v = json!({"all": true});
        apply_host_action(&mut v, "clear").unwrap();
        assert_eq!(v["action"], "clear");
        let mut v = serde_json::Value::Null;
        apply_host_action(&mut v, "clear").unwrap();
        assert_eq!(v, json!({"action": "clear"}));
        let mut v = json!({"action": "place"});
        assert_eq!(apply_host_action(&mut v, "clear").unwrap_err().code, "invalid_arguments");
    }
}

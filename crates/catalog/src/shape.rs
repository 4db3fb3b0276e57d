//! A schema in a form checked without `jsonschema`: a tool's output read as JSON text, for
//! calls that pass the output on as text (`quiver_router::Call::outputs_as_text`: no
//! `serde_json::Value` is built, checked and dropped), and a `Value` (a call's arguments, an
//! output read as a `Value`), which this check walks once instead of `jsonschema`'s validator.
//!
//! [`Shape::of`] accepts only schemas this check decides exactly as `jsonschema` does (draft
//! 2020-12, formats not asserted), built from:
//! - leaves that constrain at most their JSON `type` (one or a list) and a numeric `minimum` /
//!   `maximum`;
//! - objects (`type: object` with `properties`, `required`, `additionalProperties` as a
//!   boolean); an object schema without `properties` or `required` is a leaf;
//! - arrays (`type: array` with `items`);
//! - string enumerations (`enum` of strings, `const` string, or a `oneOf` / `anyOf` of such
//!   constants, as `schemars` writes a unit enum);
//! - a schema or null (`anyOf` / `oneOf` of a schema and `{"type": "null"}`, as `schemars`
//!   writes an `Option` of a struct), or `type: [object|array, "null"]`;
//! - `$ref` to `#/$defs/NAME` (or `#/definitions/NAME`) of the root, at most 16 deep;
//! - annotations (`title`, `description`, `format`, `default`, `examples`, ...) anywhere.
//!
//! Anything else (`pattern`, `minItems`, `allOf`, `if`, a `$ref` elsewhere, ...) has no shape,
//! and its values are checked by `jsonschema` as before. The root must be an object schema.
//!
//! [`Shape::known_to_compile`] says when such a schema is one `jsonschema` compiles without
//! trying it (a plugin's first load then leaves its compile to the first call that needs the
//! validator: [`crate::PluginEntry::new`]).
//!
//! [`Shape::accepts`] says yes only when the text is one JSON object the schema accepts, in
//! which no object has a key its schema does not declare or a key twice. It reads the common
//! texts (no string escapes, integers only) in one pass of its own (`scan`), whose yes is
//! held to the parser's, and any other text with `serde_json`'s parser (the one the `Value`
//! path uses): so the syntax it accepts is never more than `serde_json`'s.
//! [`Shape::accepts_value`] says yes only when the value is an object the schema accepts (there, a key an object's schema does not declare is accepted unless
//! its `additionalProperties` is `false`). A "no" from either is not a verdict: the caller asks
//! `jsonschema`, whose validator decides and words the error. The property tests
//! (`text_verdicts_agree_with_jsonschema`, `nested_text_verdicts_agree_with_jsonschema` and
//! their `value_` twins) hold every yes to `jsonschema`'s verdict, and every valid text without
//! undeclared or repeated keys, and every valid value, to a yes.

use std::fmt;

mod scan;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// JSON types, as bits.
const STRING: u8 = 1;
const INTEGER: u8 = 2;
const NUMBER: u8 = 4;
const BOOLEAN: u8 = 8;
const NULL: u8 = 16;
const ARRAY: u8 = 32;
const OBJECT: u8 = 64;
const ANY: u8 = STRING | INTEGER | NUMBER | BOOLEAN | NULL | ARRAY | OBJECT;

/// Keywords that never change a verdict (draft 2020-12, formats not asserted).
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "readOnly",
    "writeOnly",
    "deprecated",
    "format",
];

/// Draft 2020-12's meta-schema, as `$schema` names it (a trailing `#` allowed).
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// Whether `value` holds a `$schema` key at any depth (a subschema in another dialect).
fn names_a_dialect(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.contains_key("$schema") || m.values().any(names_a_dialect),
        Value::Array(list) => list.iter().any(names_a_dialect),
        _ => false,
    }
}

/// At most this many properties per object (one bit each for "seen" and "required").
const MAX_PROPERTIES: usize = 64;

/// At most this many `$ref`s followed from the root to a leaf (recursive types have no shape).
const MAX_DEPTH: usize = 16;

/// What one value must be.
#[derive(Debug, Clone)]
enum Node {
    /// Any value of these types (numbers within the bounds).
    Leaf { types: u8, minimum: Option<f64>, maximum: Option<f64> },
    /// An object of declared properties, or null when `nullable`.
    Object { shape: ObjectShape, nullable: bool },
    /// An array whose items are each `items`, or null when `nullable`.
    Array { items: Box<Node>, nullable: bool },
    /// One of these strings, or null when `nullable`.
    Strings { values: Box<[Box<str>]>, nullable: bool },
}

/// An object's declared properties.
#[derive(Debug, Clone)]
struct ObjectShape {
    props: Box<[(Box<str>, Node)]>,
    /// Bit `i`: property `i` is required.
    required: u64,
    /// Keys it does not declare are allowed (`additionalProperties` absent or `true`); only
    /// [`Shape::accepts_value`] reads this (the text check never accepts such a key).
    open: bool,
}

/// An object schema in the form [`Shape::accepts`] checks on text and [`Shape::accepts_value`]
/// on a `Value`.
#[derive(Debug, Clone)]
pub struct Shape(ObjectShape);

fn type_bit(name: &str) -> Option<u8> {
    Some(match name {
        "string" => STRING,
        // A number with a zero fraction is an integer too (`1.0`).
        "integer" => INTEGER,
        "number" => NUMBER | INTEGER,
        "boolean" => BOOLEAN,
        "null" => NULL,
        "array" => ARRAY,
        "object" => OBJECT,
        _ => return None,
    })
}

fn types_of(v: Option<&Value>) -> Option<u8> {
    match v {
        None => Some(ANY),
        Some(Value::String(s)) => type_bit(s),
        Some(Value::Array(list)) if !list.is_empty() => {
            list.iter().try_fold(0, |bits, t| Some(bits | type_bit(t.as_str()?)?))
        }
        _ => None,
    }
}

/// A finite bound that can be compared as `f64` without changing the verdict.
fn bound(v: Option<&Value>) -> Option<Option<f64>> {
    match v {
        None => Some(None),
        Some(Value::Number(n)) => {
            let f = n.as_f64()?;
            // Past 2^53 an integer bound is not exact as f64.
            (f.is_finite() && f.abs() <= 9_007_199_254_740_992.0).then_some(Some(f))
        }
        _ => None,
    }
}

/// Whether every key of `m` is an annotation or one of `allowed`.
fn only(m: &Map<String, Value>, allowed: &[&str]) -> bool {
    m.keys().all(|k| ANNOTATIONS.contains(&k.as_str()) || allowed.contains(&k.as_str()))
}

/// The schemas `$ref`s point at: the root's `$defs` and `definitions`.
struct Defs<'s> {
    root: &'s Map<String, Value>,
}

impl<'s> Defs<'s> {
    fn get(&self, reference: &str) -> Option<&'s Value> {
        let (table, name) = match reference.strip_prefix("#/$defs/") {
            Some(name) => ("$defs", name),
            None => ("definitions", reference.strip_prefix("#/definitions/")?),
        };
        // No JSON-pointer escapes or nested pointers.
        if name.is_empty() || name.contains(['/', '~', '%']) {
            return None;
        }
        self.root.get(table)?.as_object()?.get(name)
    }
}

impl Node {
    fn accepts_null(&self) -> bool {
        match self {
            Node::Leaf { types, .. } => types & NULL != 0,
            Node::Object { nullable, .. } | Node::Array { nullable, .. } | Node::Strings { nullable, .. } => *nullable,
        }
    }

    fn or_null(self) -> Node {
        match self {
            Node::Leaf { types, minimum, maximum } => Node::Leaf { types: types | NULL, minimum, maximum },
            Node::Object { shape, .. } => Node::Object { shape, nullable: true },
            Node::Array { items, .. } => Node::Array { items, nullable: true },
            Node::Strings { values, .. } => Node::Strings { values, nullable: true },
        }
    }

    fn of(schema: &Value, defs: &Defs<'_>, depth: usize) -> Option<Node> {
        if depth > MAX_DEPTH {
            return None;
        }
        let m = match schema {
            Value::Bool(true) => return Some(Node::Leaf { types: ANY, minimum: None, maximum: None }),
            Value::Object(m) => m,
            _ => return None,
        };
        if let Some(r) = m.get("$ref") {
            return if only(m, &["$ref"]) { Node::of(defs.get(r.as_str()?)?, defs, depth + 1) } else { None };
        }
        for (key, exactly_one) in [("anyOf", false), ("oneOf", true)] {
            if let Some(list) = m.get(key) {
                return if only(m, &[key]) {
                    Node::alternatives(list.as_array()?, exactly_one, defs, depth)
                } else {
                    None
                };
            }
        }
        if let Some(list) = m.get("enum") {
            if !only(m, &["enum", "type"]) || m.get("type").is_some_and(|t| t != "string") {
                return None;
            }
            let values = list.as_array()?.iter().map(|v| v.as_str().map(Box::from)).collect::<Option<_>>()?;
            return Some(Node::Strings { values, nullable: false });
        }
        if let Some(c) = m.get("const") {
            if !only(m, &["const", "type"]) || m.get("type").is_some_and(|t| t != "string") {
                return None;
            }
            return Some(Node::Strings { values: Box::new([c.as_str()?.into()]), nullable: false });
        }
        let types = types_of(m.get("type"))?;
        let nullable = types & NULL != 0;
        if m.contains_key("properties") || m.contains_key("required") {
            if types & !NULL != OBJECT || !only(m, &["type", "properties", "required", "additionalProperties"]) {
                return None;
            }
            return Some(Node::Object { shape: ObjectShape::of(m, defs, depth)?, nullable });
        }
        if let Some(items) = m.get("items") {
            if types & !NULL != ARRAY || !only(m, &["type", "items"]) {
                return None;
            }
            return Some(Node::Array { items: Box::new(Node::of(items, defs, depth)?), nullable });
        }
        // `additionalProperties` alone only refuses keys of objects with no declared ones.
        if !only(m, &["type", "minimum", "maximum"]) {
            return None;
        }
        Some(Node::Leaf { types, minimum: bound(m.get("minimum"))?, maximum: bound(m.get("maximum"))? })
    }

    /// `anyOf` / `oneOf` (`exactly_one`): one schema, or string constants, and maybe null.
    fn alternatives(list: &[Value], exactly_one: bool, defs: &Defs<'_>, depth: usize) -> Option<Node> {
        let is_null =
            |v: &&Value| v.as_object().is_some_and(|m| only(m, &["type"]) && m.get("type") == Some(&"null".into()));
        let nulls = list.iter().filter(is_null).count();
        let rest: Vec<&Value> = list.iter().filter(|v| !is_null(v)).collect();
        let node = match rest.as_slice() {
            [] => return None,
            [one] => Node::of(one, defs, depth)?,
            many => {
                let mut values: Vec<Box<str>> = Vec::with_capacity(many.len());
                for alt in many {
                    match Node::of(alt, defs, depth)? {
                        Node::Strings { values: v, nullable: false } => values.extend(v),
                        _ => return None,
                    }
                }
                // `oneOf` of repeated constants refuses them: not decided here.
                let mut distinct: Vec<&str> = values.iter().map(|v| &**v).collect();
                distinct.sort_unstable();
                distinct.dedup();
                if exactly_one && distinct.len() != values.len() {
                    return None;
                }
                Node::Strings { values: values.into(), nullable: false }
            }
        };
        match nulls {
            0 => Some(node),
            // `oneOf` refuses null when two of its schemas take it: not decided here.
            _ if exactly_one && (nulls > 1 || node.accepts_null()) => None,
            _ => Some(node.or_null()),
        }
    }
}

impl ObjectShape {
    fn of(m: &Map<String, Value>, defs: &Defs<'_>, depth: usize) -> Option<ObjectShape> {
        // `additionalProperties` only ever refuses keys the text check does not accept anyway.
        let open = match m.get("additionalProperties") {
            None => true,
            Some(Value::Bool(open)) => *open,
            Some(_) => return None,
        };
        let props: Vec<(Box<str>, Node)> = match m.get("properties") {
            None => Vec::new(),
            Some(p) => p
                .as_object()?
                .iter()
                .map(|(k, v)| Some((k.as_str().into(), Node::of(v, defs, depth)?)))
                .collect::<Option<_>>()?,
        };
        if props.len() > MAX_PROPERTIES {
            return None;
        }
        let mut required = 0u64;
        if let Some(r) = m.get("required") {
            for name in r.as_array()? {
                // A required name with no declared property is never accepted here.
                let i = props.iter().position(|(p, _)| Some(&**p) == name.as_str())?;
                required |= 1 << i;
            }
        }
        Some(ObjectShape { props: props.into(), required, open })
    }
}

impl Shape {
    /// The shape of `schema`, when this check decides it exactly (see the module doc); the
    /// root is an object schema.
    pub fn of(schema: &Value) -> Option<Shape> {
        let root = schema.as_object()?;
        if root.get("type")?.as_str()? != "object" {
            return None;
        }
        // An object schema at the root even without `properties` (no key accepted then); the
        // tables `$ref`s point into are read through `Defs`.
        if !only(root, &["type", "properties", "required", "additionalProperties", "$defs", "definitions"]) {
            return None;
        }
        Some(Shape(ObjectShape::of(root, &Defs { root }, 0)?))
    }

    /// Whether `jsonschema` (draft 2020-12, as [`crate::compile_schema`] builds it) is known to
    /// compile `schema` without compiling it: the schema has a shape, so does every entry of its
    /// root's `$defs` and `definitions`, no `$schema` other than draft 2020-12's appears (at the
    /// root; none below it), and it is valid against the draft 2020-12 meta-schema (checked by
    /// `jsonschema`'s generated code, nothing compiled). Such a schema holds only the keywords
    /// of the module doc, each with a value the meta-schema allows, and every `$ref` resolves
    /// to a root definition; what else makes a compile fail (a `pattern` that is not a regex,
    /// a `$ref` or `$id` that does not resolve, another dialect) it cannot contain. `false`
    /// means "not known", not "does not compile". The property test
    /// `known_to_compile_implies_it_compiles` holds every yes, on schemas built from those
    /// keywords and from ones that break a compile, to `jsonschema`'s compile.
    pub fn known_to_compile(schema: &Value) -> bool {
        Shape::of(schema).is_some() && Shape::compiles_given_its_shape(schema)
    }

    /// The rest of [`Shape::known_to_compile`], for a schema known to have a shape (the caller
    /// made it: `ToolValidator` keeps it for the router).
    pub(crate) fn compiles_given_its_shape(schema: &Value) -> bool {
        let Some(root) = schema.as_object() else { return false };
        if root.get("$schema").is_some_and(|s| s.as_str().map(|s| s.trim_end_matches('#')) != Some(DRAFT_2020_12)) {
            return false;
        }
        if root.iter().any(|(key, value)| key != "$schema" && names_a_dialect(value)) {
            return false;
        }
        let defs = Defs { root };
        let tables_have_shapes = ["$defs", "definitions"].iter().all(|table| match root.get(*table) {
            None => true,
            Some(Value::Object(entries)) => entries.values().all(|d| Node::of(d, &defs, 1).is_some()),
            Some(_) => false,
        });
        tables_have_shapes && jsonschema::draft202012::meta::is_valid(schema)
    }

    /// Whether `text` is one JSON object that the schema accepts (see the module doc): `false`
    /// means "not shown here", not "invalid".
    pub fn accepts(&self, text: &str) -> bool {
        // The common texts in one pass of its own; the rest through `serde_json`'s reader.
        scan::accepts(&self.0, text).is_some() || self.parsed_accepts(text)
    }

    /// [`Shape::accepts`] through `serde_json`'s reader alone.
    fn parsed_accepts(&self, text: &str) -> bool {
        let mut de = serde_json::Deserializer::from_str(text);
        de.deserialize_map(ObjectVisitor(&self.0)).is_ok() && de.end().is_ok()
    }

    /// Whether `value` is an object that the schema accepts (see the module doc): `false` means
    /// "not shown here", not "invalid".
    pub fn accepts_value(&self, value: &Value) -> bool {
        matches!(value, Value::Object(m) if self.0.accepts(m))
    }
}

impl ObjectShape {
    /// Every key declared (or allowed when open), every required one present.
    fn accepts(&self, m: &Map<String, Value>) -> bool {
        let mut seen = 0u64;
        for (key, value) in m {
            match self.props.iter().position(|(p, _)| **p == **key) {
                Some(i) => {
                    if !self.props[i].1.accepts(value) {
                        return false;
                    }
                    seen |= 1 << i;
                }
                None if self.open => {}
                None => return false,
            }
        }
        seen & self.required == self.required
    }
}

/// An integer as its bounds are compared: past 2^53 (`exact` false) NaN, which fails any bound.
fn integer(n: f64, exact: bool) -> Option<f64> {
    Some(if exact { n } else { f64::NAN })
}

/// The type bit of a number read as `f64` (a zero fraction is an integer).
fn float_bit(v: f64) -> u8 {
    if v.fract() == 0.0 { INTEGER } else { NUMBER }
}

impl Node {
    /// A leaf value of type `bit` (a number `n`, for the bounds): the rule the text check and
    /// the `Value` check share.
    fn takes(&self, bit: u8, n: Option<f64>) -> bool {
        match self {
            Node::Leaf { types, minimum, maximum } => {
                types & bit != 0 && n.is_none_or(|n| minimum.is_none_or(|m| n >= m) && maximum.is_none_or(|m| n <= m))
            }
            _ => false,
        }
    }

    /// A string: one of the constants, or any string where a string leaf is allowed.
    fn takes_str(&self, v: &str) -> bool {
        match self {
            Node::Strings { values, .. } => values.iter().any(|s| **s == *v),
            _ => self.takes(STRING, None),
        }
    }

    /// `value` against this node, as the text check's visitor decides each JSON value.
    fn accepts(&self, value: &Value) -> bool {
        match value {
            Value::Null => self.accepts_null(),
            Value::Bool(_) => self.takes(BOOLEAN, None),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => self.takes(INTEGER, integer(u as f64, u <= 1 << 53)),
                (None, Some(i)) => self.takes(INTEGER, integer(i as f64, i.unsigned_abs() <= 1 << 53)),
                (None, None) => {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    self.takes(float_bit(f), Some(f))
                }
            },
            Value::String(s) => self.takes_str(s),
            Value::Array(items) => match self {
                Node::Array { items: node, .. } => items.iter().all(|item| node.accepts(item)),
                _ => self.takes(ARRAY, None),
            },
            Value::Object(m) => match self {
                Node::Object { shape, .. } => shape.accepts(m),
                _ => self.takes(OBJECT, None),
            },
        }
    }
}

/// Why the text was not accepted (never shown: the `Value` path words the error).
fn no<E: de::Error>() -> E {
    E::custom("not accepted")
}

/// An object of declared properties.
struct ObjectVisitor<'s>(&'s ObjectShape);

impl<'de> Visitor<'de> for ObjectVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0u64;
        while let Some(i) = map.next_key_seed(KeySeed(self.0))? {
            let bit = 1u64 << i;
            if seen & bit != 0 {
                // A repeated key: the `Value` path keeps the last one; the text keeps both.
                return Err(no());
            }
            seen |= bit;
            map.next_value_seed(NodeSeed(&self.0.props[i].1))?;
        }
        if seen & self.0.required == self.0.required { Ok(()) } else { Err(no()) }
    }
}

/// A key: the index of its declared property (any other key is not accepted).
struct KeySeed<'s>(&'s ObjectShape);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a property name")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        self.0.props.iter().position(|(p, _)| &**p == key).ok_or_else(no)
    }
}

/// One value against its node.
#[derive(Clone, Copy)]
struct NodeSeed<'s>(&'s Node);

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl NodeSeed<'_> {
    /// A leaf of type `bit` (a number `n`, for the bounds).
    fn leaf<E: de::Error>(self, bit: u8, n: Option<f64>) -> Result<(), E> {
        if self.0.takes(bit, n) { Ok(()) } else { Err(no()) }
    }

    /// An integer (past 2^53 not compared as `f64`).
    fn int<E: de::Error>(self, n: f64, exact: bool) -> Result<(), E> {
        self.leaf(INTEGER, integer(n, exact))
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf(BOOLEAN, None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.int(v as f64, v.unsigned_abs() <= 1 << 53)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.int(v as f64, v <= 1 << 53)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.leaf(float_bit(v), Some(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if self.0.takes_str(v) { Ok(()) } else { Err(no()) }
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.0.accepts_null() { Ok(()) } else { Err(no()) }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.0 {
            Node::Array { items, .. } => while seq.next_element_seed(NodeSeed(items))?.is_some() {},
            _ => {
                self.leaf::<A::Error>(ARRAY, None)?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
            }
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        match self.0 {
            Node::Object { shape, .. } => ObjectVisitor(shape).visit_map(map),
            _ => {
                self.leaf::<A::Error>(OBJECT, None)?;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// `jsonschema`'s verdict on `text`, as the `Value` path reaches it: `None` when the text
    /// does not parse.
    fn reference(schema: &Value, text: &str) -> Option<bool> {
        let value: Value = serde_json::from_str(text).ok()?;
        Some(crate::compile_schema(schema).expect("schema compiles").is_valid(&value))
    }

    fn schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Out",
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "the text", "format": "date-time"},
                "count": {"type": "integer", "format": "uint32", "minimum": 0},
                "ratio": {"type": ["number", "null"], "maximum": 1.5},
                "ok": {"type": "boolean"},
                "items": {"type": "array"},
                "extra": {"type": "object"},
                "anything": {},
            },
            "required": ["text", "count"],
            "additionalProperties": false,
        })
    }

    /// What `schemars` writes for a listing: `$defs`, `$ref`s, a unit enum as a `oneOf` of
    /// constants, an `Option` of a struct as an `anyOf` with null, arrays of objects.
    fn nested() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Listing",
            "type": "object",
            "$defs": {
                "Kind": {"oneOf": [
                    {"const": "file", "type": "string", "description": "A file."},
                    {"const": "dir", "type": "string"},
                ]},
                "Entry": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "kind": {"$ref": "#/$defs/Kind", "description": "What it is."},
                        "size": {"type": ["integer", "null"], "minimum": 0},
                        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
                    },
                    "required": ["path", "kind"],
                },
                "Owner": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            },
            "properties": {
                "entries": {"type": "array", "items": {"$ref": "#/$defs/Entry"}},
                "owner": {"anyOf": [{"$ref": "#/$defs/Owner"}, {"type": "null"}]},
                "mode": {"anyOf": [{"const": "fast"}, {"const": "slow"}, {"type": "null"}]},
                "matrix": {"type": ["array", "null"], "items": {"type": "array", "items": {"type": "number"}}},
                "truncated": {"type": "boolean"},
            },
            "required": ["entries", "truncated"],
        })
    }

    #[test]
    fn only_schemas_it_decides_exactly_have_a_shape() {
        for shaped in [
            schema(),
            nested(),
            json!({"type": "object"}),
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}, "definitions": {"A": true}}),
            json!({"type": "object", "properties": {"a": {"enum": ["x", "y"], "type": "string"}}}),
            json!({"type": "object", "properties": {"a": {"oneOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}},
                   "$defs": {"A": {"type": "object", "properties": {}}}}),
        ] {
            assert!(Shape::of(&shaped).is_some(), "{shaped}");
        }
        for no_shape in [
            json!({"type": "object", "properties": {"a": {"enum": [1, 2]}}}),
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {}, "minItems": 1}}}),
            json!({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}}),
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1e300}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"$ref": "#/$defs/A"}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A~1B"}}, "$defs": {"A/B": {}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "other.json#/A"}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A", "minimum": 1}}, "$defs": {"A": {}}}),
            json!({"type": "object", "properties": {"a": {"oneOf": [{"const": "x"}, {"const": "x"}]}}}),
            json!({"type": "object", "properties": {"a": {"oneOf": [{"type": ["string", "null"]}, {"type": "null"}]}}}),
            json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}),
            json!({"type": "object", "properties": {"a": {"properties": {}}}}),
            json!({"type": "object", "properties": {"a": {"type": "object", "additionalProperties": false}}}),
            json!({"type": "object", "required": ["missing"]}),
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"type": "object", "$id": "https://example.com/s"}),
            json!({"type": "array"}),
            json!({"properties": {}}),
            json!(true),
        ] {
            assert!(Shape::of(&no_shape).is_none(), "{no_shape}");
        }
    }

    #[test]
    fn nested_outputs_are_checked_through_refs_enums_and_arrays() {
        let shape = Shape::of(&nested()).unwrap();
        let yes = [
            r#"{"entries":[],"truncated":false}"#,
            r#"{"entries":[{"path":"a","kind":"file","size":3,"tags":["a","b"]},{"path":"b","kind":"dir","size":null}],
                "owner":{"name":"x"},"mode":"slow","matrix":[[1,2.5],[]],"truncated":true}"#,
            r#"{"entries":[{"kind":"dir","path":""}],"owner":null,"mode":null,"matrix":null,"truncated":false}"#,
        ];
        for text in yes {
            assert!(shape.accepts(text), "{text}");
            assert_eq!(reference(&nested(), text), Some(true), "{text}");
        }
        let not_shown = [
            r#"{"entries":[{"path":"a","kind":"link"}],"truncated":false}"#, // not one of the kinds
            r#"{"entries":[{"path":"a"}],"truncated":false}"#,               // `kind` missing
            r#"{"entries":[{"path":"a","kind":"file","size":-1}],"truncated":false}"#,
            r#"{"entries":[{"path":"a","kind":"file","tags":["c"]}],"truncated":false}"#,
            r#"{"entries":[{"path":"a","kind":"file","x":1}],"truncated":false}"#, // undeclared key
            r#"{"entries":{},"truncated":false}"#,
            r#"{"entries":[],"owner":{},"truncated":false}"#, // owner's `name` missing
            r#"{"entries":[],"mode":"other","truncated":false}"#,
            r#"{"entries":[],"matrix":[["1"]],"truncated":false}"#,
            r#"{"entries":[],"matrix":[1],"truncated":false}"#,
        ];
        for text in not_shown {
            assert!(!shape.accepts(text), "{text}");
        }
    }

    #[test]
    fn accepts_what_the_schema_accepts_and_nothing_it_cannot_show() {
        let shape = Shape::of(&schema()).unwrap();
        let yes = [
            r#"{"text":"hi","count":3}"#,
            r#" { "count" : 3.0 , "text" : "a \"quoted\" \u00e9" , "ratio": null } "#,
            r#"{"text":"","count":0,"ratio":1.5,"ok":true,"items":[1,[2],{"a":3}],"extra":{"k":[]},"anything":null}"#,
        ];
        for text in yes {
            assert!(shape.accepts(text), "{text}");
            assert_eq!(reference(&schema(), text), Some(true), "{text}");
        }
        let not_shown = [
            r#"{"text":"hi"}"#,                     // required `count` missing
            r#"{"text":"hi","count":-1}"#,          // below the minimum
            r#"{"text":"hi","count":1.5}"#,         // not an integer
            r#"{"text":"hi","count":1,"ratio":2}"#, // above the maximum
            r#"{"text":1,"count":1}"#,              // wrong type
            r#"{"text":"hi","count":1,"other":1}"#, // undeclared key
            r#"{"text":"hi","count":1,"count":2}"#, // repeated key
            r#"{"text":"hi","count":1} x"#,         // trailing bytes
            r#"{"text":"hi","count":1"#,            // cut short
            r#"{"text":"\x","count":1}"#,           // bad escape
            r#"["text"]"#,
            r#""text""#,
        ];
        for text in not_shown {
            assert!(!shape.accepts(text), "{text}");
        }
    }

    /// A JSON value of any kind, as text, a few levels deep.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            (-3i32..5).prop_map(|i| json!(f64::from(i))),
            "[a-z\"\\\\é\u{1F600}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Key and value texts of an object over the schema's property names and another one,
    /// values of any kind, keys possibly repeated, numbers written as integers or with a
    /// fraction or an exponent.
    fn members() -> impl Strategy<Value = Vec<(&'static str, String)>> {
        let key = prop_oneof![
            4 => prop::sample::select(vec!["text", "count", "ratio", "ok", "items", "extra", "anything"]),
            1 => Just("other"),
        ];
        let value = prop_oneof![
            3 => any_json().prop_map(|v| v.to_string()),
            1 => (-5i64..5).prop_map(|n| format!("{n}.0")),
            1 => (-5i64..5).prop_map(|n| format!("{n}e0")),
        ];
        prop::collection::vec((key, value), 0..6)
    }

    /// `valid` mostly, else any JSON value.
    fn maybe(valid: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
        prop_oneof![4 => valid, 1 => any_json()].boxed()
    }

    /// An object of `fields` (each left out when its flag is off), with an undeclared key when
    /// `extra`; and whether it is clean (no undeclared key in it or its parts).
    fn object(fields: Vec<(&str, (Value, bool), bool)>, extra: bool) -> (Value, bool) {
        let mut m = Map::new();
        let mut clean = !extra;
        for (k, (v, c), present) in fields {
            if present {
                m.insert(k.to_owned(), v);
                clean &= c;
            }
        }
        if extra {
            m.insert("zz_extra".into(), json!(1));
        }
        (Value::Object(m), clean)
    }

    fn entry() -> impl Strategy<Value = (Value, bool)> {
        let path = maybe("[a-z]{0,3}".prop_map(Value::from));
        let kind = maybe(prop::sample::select(vec!["file", "dir", "link"]).prop_map(Value::from));
        let size =
            maybe(prop_oneof![(0u64..100).prop_map(Value::from), Just(Value::Null), (-3i64..0).prop_map(Value::from)]);
        let tags = maybe(
            prop::collection::vec(prop::sample::select(vec!["a", "b", "c"]).prop_map(Value::from), 0..3)
                .prop_map(Value::Array),
        );
        (path, kind, size, tags, any::<[bool; 4]>(), prop::bool::weighted(0.1)).prop_map(|(p, k, s, t, on, extra)| {
            object(
                vec![
                    ("path", (p, true), on[0] || on[1]),
                    ("kind", (k, true), on[1] || on[2]),
                    ("size", (s, true), on[2]),
                    ("tags", (t, true), on[3]),
                ],
                extra,
            )
        })
    }

    fn listing() -> impl Strategy<Value = (Value, bool)> {
        let entries = prop_oneof![
            4 => prop::collection::vec(entry(), 0..3).prop_map(|list| {
                let clean = list.iter().all(|(_, c)| *c);
                (Value::Array(list.into_iter().map(|(v, _)| v).collect()), clean)
            }),
            1 => any_json().prop_map(|v| (v, true)),
        ];
        let owner = prop_oneof![
            Just((Value::Null, true)),
            (maybe("[a-z]{0,3}".prop_map(Value::from)), any::<bool>(), prop::bool::weighted(0.1))
                .prop_map(|(name, on, extra)| object(vec![("name", (name, true), on)], extra)),
            any_json().prop_map(|v| (v, true)),
        ];
        let mode = maybe(prop_oneof![
            Just(Value::Null),
            prop::sample::select(vec!["fast", "slow", "other"]).prop_map(Value::from)
        ]);
        let number = prop_oneof![(-10i64..10).prop_map(Value::from), (-1e3f64..1e3).prop_map(Value::from)];
        let matrix = maybe(prop_oneof![
            Just(Value::Null),
            prop::collection::vec(prop::collection::vec(maybe(number), 0..3).prop_map(Value::Array), 0..3)
                .prop_map(Value::Array),
        ]);
        let truncated = maybe(any::<bool>().prop_map(Value::Bool));
        (entries, owner, mode, matrix, truncated, any::<[bool; 5]>(), prop::bool::weighted(0.1)).prop_map(
            |(e, o, m, x, t, on, extra)| {
                object(
                    vec![
                        ("entries", e, on[0] || on[4]),
                        ("owner", o, on[1]),
                        ("mode", (m, true), on[2]),
                        ("matrix", (x, true), on[3]),
                        ("truncated", (t, true), on[4] || on[0]),
                    ],
                    extra,
                )
            },
        )
    }

    /// Whether `v` holds an integer past 2^53 (its bounds are left to `jsonschema`).
    fn has_big_integer(v: &Value) -> bool {
        match v {
            Value::Number(n) => n.as_u64().is_some_and(|u| u > 1 << 53) || n.as_i64().is_some_and(|i| i < -(1 << 53)),
            Value::Array(items) => items.iter().any(has_big_integer),
            Value::Object(m) => m.values().any(has_big_integer),
            _ => false,
        }
    }

    /// One keyword and its value, for a subschema: the keywords a shape is built from, with
    /// values right and wrong, and ones that make `jsonschema`'s compile fail (a `pattern` that
    /// is not a regex, a `$ref` or `$id` that does not resolve, another dialect).
    fn keyword() -> impl Strategy<Value = (&'static str, Value)> {
        let types =
            prop::sample::select(vec!["string", "integer", "number", "boolean", "null", "array", "object", "strng"]);
        prop_oneof![
            4 => types.clone().prop_map(|t| ("type", json!(t))),
            1 => prop::collection::vec(types, 0..3).prop_map(|t| ("type", json!(t))),
            1 => prop::sample::select(vec![json!(0), json!(-2.5), json!("a"), json!(1e300)]).prop_map(|v| ("minimum", v)),
            1 => prop::sample::select(vec![json!(["a", "b"]), json!([1, 2]), json!("a"), json!([])]).prop_map(|v| ("enum", v)),
            1 => prop::sample::select(vec![json!("x"), json!(3)]).prop_map(|v| ("const", v)),
            1 => prop::sample::select(vec![json!("a+"), json!("("), json!(5)]).prop_map(|v| ("pattern", v)),
            1 => prop::sample::select(vec!["#/$defs/A", "#/$defs/Missing", "#/definitions/A", "other.json#/A", "#/$defs/A~1B"])
                .prop_map(|r| ("$ref", json!(r))),
            1 => prop::sample::select(vec![json!("::bad"), json!("https://example.com/s"), json!(7)]).prop_map(|v| ("$id", v)),
            1 => prop::sample::select(vec![json!("http://json-schema.org/draft-07/schema#"), json!("x"), json!(DRAFT_2020_12)])
                .prop_map(|v| ("$schema", v)),
            1 => prop::sample::select(vec![json!("T"), json!(5)]).prop_map(|v| ("title", v)),
            1 => prop::sample::select(vec![json!("date-time"), json!("no-such-format"), json!(false)]).prop_map(|v| ("format", v)),
            1 => prop::sample::select(vec![json!({"$schema": "x"}), json!([1]), json!(null)]).prop_map(|v| ("default", v)),
            1 => prop::sample::select(vec![json!(["a"]), json!("a"), json!(["a", "a"]), json!(["zz"])]).prop_map(|v| ("required", v)),
            1 => prop::sample::select(vec![json!(false), json!(true), json!({"type": "string"}), json!(1)])
                .prop_map(|v| ("additionalProperties", v)),
            1 => prop::sample::select(vec![json!(1), json!("x")]).prop_map(|v| ("minItems", v)),
        ]
    }

    /// A subschema: `true`, `false`, or an object of a few keywords, with `properties`,
    /// `items`, `anyOf` / `oneOf` of subschemas, or a nested `$defs`.
    fn subschema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(json!(true)),
            1 => Just(json!(false)),
            16 => prop::sample::select(vec!["string", "integer", "number", "boolean", "null", "array", "object"])
                .prop_map(|t| json!({"type": t, "description": "d"})),
            6 => prop::collection::vec(keyword(), 0..3).prop_map(|kws| Value::Object(kws.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ];
        leaf.prop_recursive(3, 24, 3, |inner| {
            prop_oneof![
                (prop::option::weighted(0.3, keyword()), prop::collection::vec(("[a-c]", inner.clone()), 0..3))
                    .prop_map(|(kw, props)| {
                        let mut m: Map<String, Value> = kw.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                        m.entry("type").or_insert_with(|| json!("object"));
                        m.insert("properties".into(), Value::Object(props.into_iter().collect()));
                        Value::Object(m)
                    }),
                (prop::sample::select(vec!["array", "object"]), inner.clone())
                    .prop_map(|(t, s)| json!({"type": t, "items": s})),
                (
                    prop::sample::select(vec!["anyOf", "oneOf"]),
                    prop::collection::vec(inner.clone(), 0..3),
                    any::<bool>()
                )
                    .prop_map(|(k, mut list, null)| {
                        if null {
                            list.push(json!({"type": "null"}));
                        }
                        json!({k: list})
                    }),
                inner.clone().prop_map(|s| json!({"type": "object", "$defs": {"A": s}})),
            ]
        })
    }

    /// A tool schema: an object at the root with properties, `$defs` (`A` and `A/B`, which
    /// `$ref`s may name), maybe `definitions`, and maybe a few more keywords.
    fn tool_schema() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec(("[a-c]", subschema()), 0..4),
            prop::collection::vec((prop::sample::select(vec!["A", "A/B", "C"]), subschema()), 0..3),
            prop::option::weighted(0.3, subschema()),
            prop::option::weighted(0.3, keyword()),
        )
            .prop_map(|(props, defs, definitions, extra)| {
                let mut root: Map<String, Value> = extra.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
                root.insert("type".into(), json!("object"));
                root.insert("properties".into(), Value::Object(props.into_iter().collect()));
                if !defs.is_empty() {
                    root.insert(
                        "$defs".into(),
                        Value::Object(defs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
                    );
                }
                if let Some(d) = definitions {
                    root.insert("definitions".into(), json!({"A": d}));
                }
                Value::Object(root)
            })
    }

    #[test]
    fn shaped_tool_schemas_are_known_to_compile_and_others_are_not() {
        for known in [
            schema(),
            nested(),
            json!({"type": "object"}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}, "definitions": {"A": true}}),
        ] {
            assert!(Shape::known_to_compile(&known), "{known}");
            crate::compile_schema(&known).expect("it compiles");
        }
        for unknown in [
            // No shape: left to the compile.
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
            json!({"type": "object", "properties": {"a": {"type": "strng"}}}),
            // A shape, but a definition without one (never reached by a `$ref`).
            json!({"type": "object", "$defs": {"Unused": {"type": "string", "pattern": "("}}}),
            json!({"type": "object", "$defs": {"Unused": {"$id": "::bad"}}}),
            // A shape, but another dialect, at the root or below it.
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
            json!({"type": "object", "properties": {"a": {"$schema": "x"}}}),
            json!({"type": "object", "properties": {"a": {"default": {"$schema": "x"}}}}),
            // A shape, but not valid against the meta-schema (a title must be a string).
            json!({"type": "object", "properties": {"a": {"title": 5}}}),
        ] {
            assert!(!Shape::known_to_compile(&unknown), "{unknown}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// A schema known to compile does: checked against `jsonschema`'s own compile on tool
        /// schemas of shape keywords, wrong values and keywords that break a compile.
        #[test]
        fn known_to_compile_implies_it_compiles(schema in tool_schema()) {
            if Shape::known_to_compile(&schema) {
                prop_assert!(crate::compile_schema(&schema).is_ok(), "known to compile but does not: {}", schema);
            }
        }
    }

    /// The generator is not vacuous: of the same kind of schemas, some are known to compile
    /// and some are not, and some of those do not compile.
    #[test]
    fn the_schema_generator_reaches_both_verdicts() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut known, mut unknown, mut failing) = (0, 0, 0);
        for _ in 0..2000 {
            let schema = tool_schema().new_tree(&mut runner).unwrap().current();
            if Shape::known_to_compile(&schema) {
                known += 1;
            } else {
                unknown += 1;
                failing += usize::from(crate::compile_schema(&schema).is_err());
            }
        }
        assert!(
            known >= 100 && unknown >= 200 && failing >= 100,
            "known {known}, unknown {unknown}, failing {failing}"
        );
    }

    /// Whether the text has only what the one-pass reader reads: no escape, no number with a
    /// fraction or an exponent or of more than 15 digits, no `-0`.
    fn scanner_reads(text: &str) -> bool {
        let Ok(value) = serde_json::from_str::<Value>(text) else { return false };
        fn plain(v: &Value) -> bool {
            match v {
                Value::Number(n) => n.as_i64().is_some_and(|i| i.unsigned_abs() < 1_000_000_000_000_000),
                Value::String(s) => !s.contains(|c: char| c == '"' || c == '\\' || c < ' '),
                Value::Array(list) => list.iter().all(plain),
                Value::Object(m) => m.iter().all(|(k, v)| plain(&Value::from(k.as_str())) && plain(v)),
                _ => true,
            }
        }
        plain(&value) && !text.contains('\\') && !text.contains(['.', 'e', 'E']) && !text.contains("-0")
    }

    /// The one-pass reader's yes is the parser's; and where it reads the text, so is its no.
    fn scanner_agrees(shape: &Shape, text: &str) -> Result<(), TestCaseError> {
        let (scanned, parsed) = (scan::accepts(&shape.0, text).is_some(), shape.parsed_accepts(text));
        if scanned {
            prop_assert!(parsed, "the scanner said yes, the parser no: {}", text);
        } else if parsed && scanner_reads(text) {
            prop_assert!(false, "the parser said yes, the scanner not: {}", text);
        }
        Ok(())
    }

    /// Every text one byte away from a valid one (each byte changed to, or preceded by, each
    /// of a set of bytes, or dropped), compact and pretty: the one-pass reader agrees with the
    /// parser on all of them.
    #[test]
    fn the_scanner_agrees_with_the_parser_one_edit_away() {
        let (closed, open) = (Shape::of(&schema()).unwrap(), Shape::of(&nested()).unwrap());
        let texts = [
            (
                &closed,
                json!({"text": "hé", "count": 10, "ratio": null, "ok": true, "items": [1, [], {"a": false}], "extra": {"k": "v"}, "anything": -3}),
            ),
            (
                &open,
                json!({"entries": [{"path": "a", "kind": "dir", "size": 0, "tags": ["a"]}], "owner": {"name": "n"}, "mode": "slow", "matrix": [[1, -20]], "truncated": false}),
            ),
        ];
        let bytes = b" \t\n{}[]\":,0123456789-.eE+truefalsn\\/x\x01\x7f";
        let (mut edits, mut scanned) = (0, 0);
        for (shape, value) in texts {
            for text in [value.to_string(), serde_json::to_string_pretty(&value).unwrap()] {
                assert!(scan::accepts(&shape.0, &text).is_some(), "{text}");
                let text = text.into_bytes();
                for i in 0..=text.len() {
                    let mut variants = Vec::new();
                    for &b in bytes {
                        let mut t = text.clone();
                        t.insert(i, b);
                        variants.push(t);
                        if i < text.len() {
                            let mut t = text.clone();
                            t[i] = b;
                            variants.push(t);
                        }
                    }
                    if i < text.len() {
                        let mut t = text.clone();
                        t.remove(i);
                        variants.push(t);
                    }
                    for t in variants {
                        let Ok(t) = String::from_utf8(t) else { continue };
                        edits += 1;
                        scanned += usize::from(scan::accepts(&shape.0, &t).is_some());
                        if let Err(e) = scanner_agrees(shape, &t) {
                            panic!("{e}");
                        }
                    }
                }
            }
        }
        // Whitespace and digit edits keep many texts valid: the reader says yes to some.
        assert!(edits > 20_000 && scanned > 1_000, "edits {edits}, scanned yes {scanned}");
    }

    #[test]
    fn the_scanner_reads_the_texts_tools_answer_with() {
        let (closed, open) = (Shape::of(&schema()).unwrap(), Shape::of(&nested()).unwrap());
        let read = [
            (&closed, r#"{"text":"hello","count":3}"#),
            (&closed, " {\n  \"text\" : \"h\u{e9}llo \u{1F600}\",\t\"count\":0, \"ratio\": null,\r\n\"ok\":true} \n"),
            (
                &closed,
                r#"{"text":"","count":123456789012345,"items":[1,"a",[],{"k":[null,false]}],"extra":{},"anything":{"a":{"b":[]}}}"#,
            ),
            (
                &open,
                r#"{"entries":[{"path":"a","kind":"dir","size":null,"tags":["a","b"]}],"owner":{"name":"n"},"mode":"fast","matrix":[[1,-2],[]],"truncated":false}"#,
            ),
            (&open, r#"{"entries":[],"owner":null,"truncated":true}"#),
        ];
        for (shape, text) in read {
            assert!(scan::accepts(&shape.0, text).is_some(), "{text}");
            assert!(shape.parsed_accepts(text), "{text}");
        }
        // Left to the parser, which accepts them.
        let left = [
            (&closed, r#"{"text":"a\"b","count":1}"#),
            (&closed, r#"{"text":"a","count":1.0}"#),
            (&closed, r#"{"text":"a","count":1e2}"#),
            (&closed, r#"{"text":"a","count":-0}"#),
            (&closed, r#"{"text":"a","count":1234567890123456}"#),
            (&closed, r#"{"text":"a","count":1,"ratio":0.5}"#),
        ];
        for (shape, text) in left {
            assert!(scan::accepts(&shape.0, text).is_none(), "{text}");
            assert!(shape.accepts(text), "{text}");
        }
        // Refused by both.
        let refused = [
            r#"{"text":"a"}"#,
            r#"{"text":"a","count":-1}"#,
            r#"{"text":"a","count":01}"#,
            r#"{"text":"a","count":1,}"#,
            r#"{"text":"a","count":1,"count":2}"#,
            r#"{"text":"a","count":1,"other":1}"#,
            r#"{"text":"a","count":1,"items":[1,]}"#,
            r#"{"text":"a","count":1} x"#,
            r#"{"text":"a","count":1,"ok":tru}"#,
            r#"{"text":"a","count":1,"ok":null}"#,
            "{\"text\":\"a\tb\",\"count\":1}",
            r#"["text"]"#,
            r#"{"text":"a","count":1"#,
        ];
        for text in refused {
            assert!(scan::accepts(&closed.0, text).is_none(), "{text}");
            assert!(!closed.accepts(text), "{text}");
        }
        // Nesting past the reader's limit is left to the parser.
        let deep = format!(r#"{{"text":"a","count":1,"anything":{}{}}}"#, "[".repeat(70), "]".repeat(70));
        assert!(scan::accepts(&closed.0, &deep).is_none());
        assert!(closed.accepts(&deep));
    }

    /// [`Shape::accepts_value`] on `value` against `jsonschema`'s verdict.
    fn value_verdict_agrees(schema: &Value, value: &Value) -> Result<(), TestCaseError> {
        let shape = Shape::of(schema).unwrap();
        let verdict = crate::compile_schema(schema).expect("schema compiles").is_valid(value);
        let accepted = shape.accepts_value(value);
        if accepted {
            prop_assert!(verdict, "accepted as a value but not by jsonschema: {}", value);
        } else if !has_big_integer(value) {
            prop_assert!(!verdict, "valid but not accepted as a value: {}", value);
        }
        Ok(())
    }

    #[test]
    fn a_value_is_checked_as_jsonschema_checks_it() {
        let (closed, open) = (Shape::of(&schema()).unwrap(), Shape::of(&nested()).unwrap());
        let yes = [
            (&closed, json!({"text": "hi", "count": 3, "ratio": null, "items": [1, {"a": 2}], "anything": [null]})),
            (&closed, json!({"text": "", "count": 2.0, "ratio": 1.5, "ok": false, "extra": {}})),
            // Undeclared keys, where no `additionalProperties: false` refuses them.
            (&open, json!({"entries": [{"path": "a", "kind": "dir", "x": 1}], "truncated": true, "y": [2]})),
            (&open, json!({"entries": [], "owner": {"name": "n", "z": null}, "mode": "fast", "truncated": false})),
        ];
        for (shape, value) in yes {
            assert!(shape.accepts_value(&value), "{value}");
        }
        let no = [
            (&closed, json!({"text": "hi"})),
            (&closed, json!({"text": "hi", "count": -1})),
            (&closed, json!({"text": "hi", "count": 1.5})),
            (&closed, json!({"text": "hi", "count": 1, "ratio": 2})),
            (&closed, json!({"text": "hi", "count": 1, "other": 1})),
            (&closed, json!({"text": "hi", "count": 1u64 << 60})), // past 2^53: left to jsonschema
            (&closed, json!(["text"])),
            (&open, json!({"entries": [{"path": "a", "kind": "link"}], "truncated": false})),
            (&open, json!({"entries": [], "owner": {}, "truncated": false})),
            (&open, json!({"entries": [], "matrix": [[1, "2"]], "truncated": false})),
        ];
        for (shape, value) in no {
            assert!(!shape.accepts_value(&value), "{value}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the text says yes to, `jsonschema` accepts; and on objects with only
        /// declared keys, each once, the two agree both ways.
        #[test]
        fn text_verdicts_agree_with_jsonschema(members in members()) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let text = format!("{{{}}}", body.join(","));
            let schema = schema();
            let shape = Shape::of(&schema).unwrap();
            let verdict = reference(&schema, &text);
            prop_assert!(verdict.is_some(), "the generated text parses: {}", text);
            if shape.accepts(&text) {
                prop_assert_eq!(verdict, Some(true), "accepted as text but not by jsonschema: {}", text);
            }
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            let declared_once = keys.len() == members.len() && !keys.contains(&"other");
            // Integers past 2^53 are left to `jsonschema` (see the module doc).
            let big = serde_json::from_str::<Value>(&text).is_ok_and(|v| has_big_integer(&v));
            if declared_once && verdict == Some(true) && !big {
                prop_assert!(shape.accepts(&text), "valid but not accepted as text: {}", text);
            }
        }

        /// The same on [`nested`]: listings with every field now valid, now anything, now
        /// left out, and sometimes an undeclared key.
        #[test]
        fn nested_text_verdicts_agree_with_jsonschema((value, clean) in listing()) {
            let text = value.to_string();
            let schema = nested();
            let shape = Shape::of(&schema).unwrap();
            let verdict = reference(&schema, &text);
            if shape.accepts(&text) {
                prop_assert_eq!(verdict, Some(true), "accepted as text but not by jsonschema: {}", text);
            }
            if clean && verdict == Some(true) && !has_big_integer(&value) {
                prop_assert!(shape.accepts(&text), "valid but not accepted as text: {}", text);
            }
        }

        /// A value's verdict is `jsonschema`'s, both ways (undeclared keys too: the root of
        /// [`schema`] refuses them, as `jsonschema` does), but for integers past 2^53, which
        /// the check does not compare and leaves to `jsonschema`.
        #[test]
        fn value_verdicts_agree_with_jsonschema(members in members()) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let value: Value = serde_json::from_str(&format!("{{{}}}", body.join(","))).unwrap();
            value_verdict_agrees(&schema(), &value)?;
        }

        /// The same on [`nested`], whose objects allow undeclared keys.
        #[test]
        fn nested_value_verdicts_agree_with_jsonschema((value, _) in listing()) {
            value_verdict_agrees(&nested(), &value)?;
        }

        /// Any value at all, against both schemas.
        #[test]
        fn arbitrary_values_are_decided_as_jsonschema_decides(value in any_json()) {
            value_verdict_agrees(&schema(), &value)?;
            value_verdict_agrees(&nested(), &value)?;
        }

        /// The one-pass reader says yes only where `serde_json`'s reader does, and on the
        /// texts it reads (no escape, fraction or exponent), wherever that reader does.
        #[test]
        fn the_scanner_says_yes_only_where_the_parser_does((value, _) in listing(), members in members()) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let flat = format!("{{{}}}", body.join(","));
            for (shape, text) in [(Shape::of(&nested()).unwrap(), value.to_string()), (Shape::of(&schema()).unwrap(), flat)] {
                scanner_agrees(&shape, &text)?;
            }
        }

        /// Any text at all: a yes means it parses, is an object and is valid.
        #[test]
        fn arbitrary_text_is_never_accepted_wrongly(text in "[ {}\\[\\]\":,0-9a-z.\\-\\\\]{0,40}") {
            let shape = Shape::of(&schema()).unwrap();
            if shape.accepts(&text) {
                prop_assert_eq!(reference(&schema(), &text), Some(true), "{}", text);
            }
        }
    }
}

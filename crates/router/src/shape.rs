//! A tool's output checked as JSON text, for calls that pass the output on as text
//! ([`crate::Call::outputs_as_text`]): no `serde_json::Value` is built, checked and dropped.
//!
//! [`OutputShape::of`] accepts only output schemas this check decides exactly as `jsonschema`
//! does: an object schema whose declared properties each constrain at most their JSON type and
//! a numeric `minimum` / `maximum`, with `required` and annotations (`title`, `description`,
//! `format`, which draft 2020-12 treats as an annotation, ...). Anything else (`$ref`,
//! `items`, `enum`, `pattern`, nested property schemas, ...) has no shape, and its outputs take
//! the `Value` path as before.
//!
//! [`OutputShape::accepts`] reads the text once with `serde_json`'s parser (the same parser the
//! `Value` path uses, so the syntax it accepts is the same) and says yes only when the text is
//! one JSON object, every key is a declared property, no key repeats, every value has a
//! declared type within the bounds, and every required property is present. A "no" is not a
//! verdict: the caller takes the `Value` path, whose validator words the error. The property
//! test `text_verdicts_agree_with_jsonschema` holds the yes to `jsonschema`'s verdict.

use std::fmt;

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

/// At most this many properties (one bit each for "seen" and "required").
const MAX_PROPERTIES: usize = 64;

/// One declared property.
#[derive(Debug, Clone)]
struct Prop {
    name: Box<str>,
    types: u8,
    minimum: Option<f64>,
    maximum: Option<f64>,
}

/// An output schema in the form [`OutputShape::accepts`] checks on text.
#[derive(Debug, Clone)]
pub(crate) struct OutputShape {
    props: Box<[Prop]>,
    /// Bit `i`: property `i` is required.
    required: u64,
}

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

fn prop(name: &str, schema: &Value) -> Option<Prop> {
    let m = schema.as_object()?;
    if !m.keys().all(|k| ANNOTATIONS.contains(&k.as_str()) || matches!(k.as_str(), "type" | "minimum" | "maximum")) {
        return None;
    }
    let (minimum, maximum) = (bound(m.get("minimum"))?, bound(m.get("maximum"))?);
    Some(Prop { name: name.into(), types: types_of(m.get("type"))?, minimum, maximum })
}

impl OutputShape {
    /// The shape of `schema`, when [`OutputShape::accepts`] decides it exactly.
    pub(crate) fn of(schema: &Value) -> Option<OutputShape> {
        let m: &Map<String, Value> = schema.as_object()?;
        let known = |k: &str| {
            ANNOTATIONS.contains(&k) || matches!(k, "type" | "properties" | "required" | "additionalProperties")
        };
        if !m.keys().all(|k| known(k)) || m.get("type")?.as_str()? != "object" {
            return None;
        }
        // `additionalProperties` only ever refuses keys this check does not accept anyway.
        match m.get("additionalProperties") {
            None | Some(Value::Bool(_)) => {}
            Some(_) => return None,
        }
        let props: Vec<Prop> = match m.get("properties") {
            None => Vec::new(),
            Some(p) => p.as_object()?.iter().map(|(k, v)| prop(k, v)).collect::<Option<_>>()?,
        };
        if props.len() > MAX_PROPERTIES {
            return None;
        }
        let mut required = 0u64;
        if let Some(r) = m.get("required") {
            for name in r.as_array()? {
                // A required name with no declared property is never accepted here.
                let i = props.iter().position(|p| Some(&*p.name) == name.as_str())?;
                required |= 1 << i;
            }
        }
        Some(OutputShape { props: props.into(), required })
    }

    /// Whether `text` is one JSON object that the schema accepts (see the module doc): `false`
    /// means "not shown here", not "invalid".
    pub(crate) fn accepts(&self, text: &str) -> bool {
        let mut de = serde_json::Deserializer::from_str(text);
        match ObjectSeed(self).deserialize(&mut de) {
            Ok(seen) => seen & self.required == self.required && de.end().is_ok(),
            Err(_) => false,
        }
    }
}

/// Why the text was not accepted (never shown: the `Value` path words the error).
fn no<E: de::Error>() -> E {
    E::custom("not accepted")
}

/// The top-level object: the set of properties seen.
struct ObjectSeed<'s>(&'s OutputShape);

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_> {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_> {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut seen = 0u64;
        while let Some(i) = map.next_key_seed(KeySeed(self.0))? {
            let bit = 1u64 << i;
            if seen & bit != 0 {
                // A repeated key: the `Value` path keeps the last one; the text keeps both.
                return Err(no());
            }
            seen |= bit;
            let prop = &self.0.props[i];
            let kind = map.next_value_seed(KindSeed)?;
            if !kind.fits(prop) {
                return Err(no());
            }
        }
        Ok(seen)
    }
}

/// A key: the index of its declared property (any other key is not accepted).
struct KeySeed<'s>(&'s OutputShape);

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
        self.0.props.iter().position(|p| &*p.name == key).ok_or_else(no)
    }
}

/// What kind of JSON value was read (its number, for bounds).
enum Kind {
    String,
    Int(f64),
    /// A number with a fraction or an exponent (an integer when its fraction is zero).
    Float(f64),
    Bool,
    Null,
    Array,
    Object,
}

impl Kind {
    fn fits(&self, p: &Prop) -> bool {
        let (bit, n) = match *self {
            Kind::String => (STRING, None),
            Kind::Int(n) => (INTEGER, Some(n)),
            Kind::Float(n) if n.fract() == 0.0 => (INTEGER, Some(n)),
            Kind::Float(n) => (NUMBER, Some(n)),
            Kind::Bool => (BOOLEAN, None),
            Kind::Null => (NULL, None),
            Kind::Array => (ARRAY, None),
            Kind::Object => (OBJECT, None),
        };
        if p.types & bit == 0 {
            return false;
        }
        match n {
            Some(n) => p.minimum.is_none_or(|m| n >= m) && p.maximum.is_none_or(|m| n <= m),
            None => true,
        }
    }
}

/// Integers past 2^53 are not compared as `f64`: not accepted when the property is bounded.
fn int(n: f64, exact: bool) -> Kind {
    if exact { Kind::Int(n) } else { Kind::Int(f64::NAN) }
}

struct KindSeed;

impl<'de> DeserializeSeed<'de> for KindSeed {
    type Value = Kind;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Kind, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KindSeed {
    type Value = Kind;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kind, E> {
        Ok(Kind::Bool)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(int(v as f64, v.unsigned_abs() <= 1 << 53))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(int(v as f64, v <= 1 << 53))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Float(v))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Kind, E> {
        Ok(Kind::String)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kind::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kind::Object)
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
        Some(quiver_catalog::compile_schema(schema).expect("schema compiles").is_valid(&value))
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

    #[test]
    fn only_schemas_it_decides_exactly_have_a_shape() {
        assert!(OutputShape::of(&schema()).is_some());
        assert!(OutputShape::of(&json!({"type": "object"})).is_some());
        for no_shape in [
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {}}}),
            json!({"type": "object", "properties": {"a": {"enum": [1, 2]}}}),
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}),
            json!({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1e300}}}),
            json!({"type": "object", "required": ["missing"]}),
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"type": "array"}),
            json!({"properties": {}}),
            json!(true),
        ] {
            assert!(OutputShape::of(&no_shape).is_none(), "{no_shape}");
        }
    }

    #[test]
    fn accepts_what_the_schema_accepts_and_nothing_it_cannot_show() {
        let shape = OutputShape::of(&schema()).unwrap();
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the text says yes to, `jsonschema` accepts; and on objects with only
        /// declared keys, each once, the two agree both ways.
        #[test]
        fn text_verdicts_agree_with_jsonschema(members in members()) {
            let body: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let text = format!("{{{}}}", body.join(","));
            let schema = schema();
            let shape = OutputShape::of(&schema).unwrap();
            let verdict = reference(&schema, &text);
            prop_assert!(verdict.is_some(), "the generated text parses: {}", text);
            if shape.accepts(&text) {
                prop_assert_eq!(verdict, Some(true), "accepted as text but not by jsonschema: {}", text);
            }
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            let declared_once = keys.len() == members.len() && !keys.contains(&"other");
            if declared_once && verdict == Some(true) {
                prop_assert!(shape.accepts(&text), "valid but not accepted as text: {}", text);
            }
        }

        /// Any text at all: a yes means it parses, is an object and is valid.
        #[test]
        fn arbitrary_text_is_never_accepted_wrongly(text in "[ {}\\[\\]\":,0-9a-z.\\-\\\\]{0,40}") {
            let shape = OutputShape::of(&schema()).unwrap();
            if shape.accepts(&text) {
                prop_assert_eq!(reference(&schema(), &text), Some(true), "{}", text);
            }
        }
    }
}

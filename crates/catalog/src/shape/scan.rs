//! The text check's first reader: one pass over the bytes for the texts tools answer with
//! (objects, arrays, strings without escapes, integers, `true`, `false`, `null`), deciding
//! against the shape as the `serde_json` reader of [`super::Shape::accepts`] does.
//!
//! It says yes, or "not here" (`None`): on anything it does not read itself (an escape or a
//! control character in a string, a number with a fraction or an exponent, or of more than 15
//! digits, `-0`, nesting past [`MAX_NESTING`]) and on anything the shape refuses, and then the
//! `serde_json` reader decides as before. So a yes here is a yes there (the property test
//! `the_scanner_says_yes_only_where_the_parser_does` holds it to that), and the syntax accepted
//! is a subset of `serde_json`'s: a text it passes on parses.

use super::{ANY, ARRAY, BOOLEAN, INTEGER, Node, OBJECT, ObjectShape};

/// Deeper texts are left to `serde_json` (whose own limit is 128).
const MAX_NESTING: u32 = 64;

/// A leaf that takes any value: what an object or array under a plain `object` / `array`
/// leaf holds.
static ANYTHING: Node = Node::Leaf { types: ANY, minimum: None, maximum: None };

/// Whether `text` is one JSON object that `shape` accepts, read in one pass; `None` when this
/// reader cannot say yes (see the module doc).
pub(super) fn accepts(shape: &ObjectShape, text: &str) -> Option<()> {
    let mut s = Scan { text, at: 0, depth: 0 };
    s.space();
    s.expect(b'{')?;
    s.object(shape)?;
    s.space();
    (s.at == text.len()).then_some(())
}

struct Scan<'a> {
    text: &'a str,
    at: usize,
    depth: u32,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// JSON's whitespace.
    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// The rest of `word` (its first byte already seen).
    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.text.as_bytes().get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A string without escapes or control characters, at its opening quote.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        let start = self.at;
        let rest = self.text.as_bytes().get(start..)?;
        let len = rest.iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        self.text.get(start..start + len)
    }

    /// An integer of at most 15 digits (below 2^53: exact as `f64`), no fraction or exponent.
    fn integer(&mut self) -> Option<f64> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let bytes = self.text.as_bytes();
        let mut n: i64 = 0;
        while let Some(&d @ b'0'..=b'9') = bytes.get(self.at) {
            n = n * 10 + i64::from(d - b'0');
            self.at += 1;
            if self.at - start > 15 {
                return None;
            }
        }
        let digits = self.at - start;
        // No digits, a leading zero, `-0`, or a fraction or exponent next.
        if digits == 0 || (bytes[start] == b'0' && (digits > 1 || negative)) {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        Some(if negative { -n } else { n } as f64)
    }

    /// One value against `node`.
    fn value(&mut self, node: &Node) -> Option<()> {
        match self.peek()? {
            b'"' => {
                let s = self.string()?;
                node.takes_str(s).then_some(())
            }
            b'{' => {
                self.at += 1;
                match node {
                    Node::Object { shape, .. } => self.nested(|s| s.object(shape)),
                    _ if node.takes(OBJECT, None) => self.nested(Scan::any_object),
                    _ => None,
                }
            }
            b'[' => {
                self.at += 1;
                match node {
                    Node::Array { items, .. } => self.nested(|s| s.array(items)),
                    _ if node.takes(ARRAY, None) => self.nested(|s| s.array(&ANYTHING)),
                    _ => None,
                }
            }
            b't' => {
                self.word(b"true")?;
                node.takes(BOOLEAN, None).then_some(())
            }
            b'f' => {
                self.word(b"false")?;
                node.takes(BOOLEAN, None).then_some(())
            }
            b'n' => {
                self.word(b"null")?;
                node.accepts_null().then_some(())
            }
            b'-' | b'0'..=b'9' => {
                let n = self.integer()?;
                node.takes(INTEGER, Some(n)).then_some(())
            }
            _ => None,
        }
    }

    /// `read` one level deeper.
    fn nested(&mut self, read: impl FnOnce(&mut Self) -> Option<()>) -> Option<()> {
        if self.depth >= MAX_NESTING {
            return None;
        }
        self.depth += 1;
        let r = read(self);
        self.depth -= 1;
        r
    }

    /// The elements of an object or an array after its opening bracket, up to `close`: none,
    /// or `element` followed by `,` or `close`, over and over.
    fn elements(&mut self, close: u8, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.space();
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            self.space();
            element(self)?;
            if self.end_of(close)? {
                return Some(());
            }
        }
    }

    /// The members of an object of declared properties, after its `{`: each key declared and
    /// seen once, every required one present.
    fn object(&mut self, shape: &ObjectShape) -> Option<()> {
        let mut seen = 0u64;
        self.elements(b'}', |s| {
            let key = s.string()?;
            let i = shape.props.iter().position(|(p, _)| **p == *key)?;
            let bit = 1u64 << i;
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            s.member_value(&shape.props[i].1)
        })?;
        (seen & shape.required == shape.required).then_some(())
    }

    /// An object under a plain `object` leaf: any keys, any values, after its `{`.
    fn any_object(&mut self) -> Option<()> {
        self.elements(b'}', |s| {
            s.string()?;
            s.member_value(&ANYTHING)
        })
    }

    /// The elements of an array after its `[`, each against `items`.
    fn array(&mut self, items: &Node) -> Option<()> {
        self.elements(b']', |s| s.value(items))
    }

    /// `:` and the value of a member.
    fn member_value(&mut self, node: &Node) -> Option<()> {
        self.space();
        self.expect(b':')?;
        self.space();
        self.value(node)
    }

    /// After an element: `close` (true) or `,` (false).
    fn end_of(&mut self, close: u8) -> Option<bool> {
        self.space();
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(false)
            }
            c if c == close => {
                self.at += 1;
                Some(true)
            }
            _ => None,
        }
    }
}

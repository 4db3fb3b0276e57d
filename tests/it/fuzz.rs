//! The bounded fuzz run of the test suite (issue 10): the four `cargo fuzz` target bodies
//! (`fuzz/bodies.rs`, the same functions the libFuzzer binaries call) run on stable under
//! `cargo test` with proptest: a fixed number of cases per target, each either arbitrary bytes or
//! a seed input (the shipped plugin manifests and `quiver.yaml`, signatures and keys, MCP
//! messages, argument objects) with a few random byte-level mutations. Each body asserts its
//! target's invariants; a panic anywhere is a failure, and proptest prints the shrunk input.
//!
//! The coverage-guided runs stay manual (nightly, `cargo fuzz`): see docs/SECURITY.md.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::json;

use crate::fuzz_bodies as bodies;

/// Bytes YAML and JSON give meaning to, inserted by the mutations.
const STRUCTURE: &[u8] = b"{}[]:,\"'\\\n\t -#&*!|>?%@`0\x00\xff";

/// One byte-level change to a seed.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Insert(Index, u8),
    InsertStructure(Index, Index),
    Delete(Index),
    Truncate(Index),
    /// Copies a slice of the input to another place (repeats keys, nests blocks deeper).
    Splice(Index, Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(at, s)| Mutation::InsertStructure(at, s)),
        any::<Index>().prop_map(Mutation::Delete),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<Index>(), any::<Index>()).prop_map(|(a, b, c)| Mutation::Splice(a, b, c)),
    ]
}

fn apply(mut data: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = data.len();
        match m {
            Mutation::Flip(at, bit) if len > 0 => data[at.index(len)] ^= 1 << bit,
            Mutation::Insert(at, b) => data.insert(at.index(len + 1), *b),
            Mutation::InsertStructure(at, s) => data.insert(at.index(len + 1), STRUCTURE[s.index(STRUCTURE.len())]),
            Mutation::Delete(at) if len > 0 => {
                data.remove(at.index(len));
            }
            Mutation::Truncate(at) => data.truncate(at.index(len + 1)),
            Mutation::Splice(a, b, to) if len > 0 => {
                let (x, y) = (a.index(len), b.index(len));
                let piece = data[x.min(y)..=x.max(y)].to_vec();
                let to = to.index(len + 1);
                data.splice(to..to, piece);
            }
            _ => {}
        }
    }
    data
}

/// Arbitrary bytes (a quarter of the cases) or a seed with 1-8 mutations.
fn input(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..512),
        3 => (proptest::sample::select(seeds), proptest::collection::vec(mutation(), 1..8))
            .prop_map(|(seed, ms)| apply(seed, &ms)),
    ]
}

/// Runs `body` on `cases` inputs. Failures are not persisted to files (CI has no use for them;
/// the shrunk input is in the failure message).
fn run(cases: u32, seeds: Vec<Vec<u8>>, body: fn(&[u8])) {
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        max_shrink_iters: 2048,
        ..Config::default()
    };
    // Every seed, unmutated, first: they must hold too.
    for seed in &seeds {
        body(seed);
    }
    let result = TestRunner::new(config).run(&input(seeds), |data| {
        body(&data);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn manifest_seeds() -> Vec<Vec<u8>> {
    let root = quiver_tests::workspace_root();
    let mut seeds: Vec<Vec<u8>> =
        ["plugins/fs-tools/tool.yaml", "plugins/text-tools/tool.yaml", "plugins/time-tools/tool.yaml", "quiver.yaml"]
            .iter()
            .map(|p| std::fs::read(root.join(p)).unwrap_or_else(|e| panic!("seed {p}: {e}")))
            .collect();
    seeds.push(b"a: &x [*x, {b: !!binary AAAA}]\n".to_vec());
    seeds.push(b"[[[[[[[[[[[[[[[[{a: [{b: [{c: 1}]}]}]]]]]]]]]]]]]]]".to_vec());
    seeds
}

fn signature_seeds() -> Vec<Vec<u8>> {
    let (fixed, _) = bodies::keys();
    let stranger = quiver_manifest::KeyPair::generate();
    let comment = quiver_manifest::bundle_comment("fuzz", "1.0.0", "00");
    vec![
        // The right key over other data, and another key over the right data.
        quiver_manifest::sign(fixed, b"manifest_version: 2\n", &comment).into_bytes(),
        quiver_manifest::sign(&stranger, bodies::SIGNED_DATA, &comment).into_bytes(),
        stranger.public_key_text().into_bytes(),
        stranger.secret_key_text().into_bytes(),
        comment.into_bytes(),
    ]
}

fn mcp_seeds() -> Vec<Vec<u8>> {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1.0.0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {
            "name": "fs_read", "arguments": {"path": "a.txt"}, "_meta": {"progressToken": 7}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "x"}}),
        json!({"jsonrpc": "2.0", "id": 3, "result": {"action": "accept", "content": {}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "vendor/custom", "params": [1, 2]}),
    ]
    .iter()
    .map(|v| v.to_string().into_bytes())
    .collect()
}

fn argument_seeds() -> Vec<Vec<u8>> {
    let args = json!({"path": "notes/a.txt", "action": "write", "n": 3, "tags": ["ab", "cd"], "nested": {"x": 1.5}});
    let with_schema = |schema: serde_json::Value| {
        let mut bytes = schema.to_string().into_bytes();
        bytes.push(0);
        bytes.extend(args.to_string().into_bytes());
        bytes
    };
    vec![
        args.to_string().into_bytes(),
        with_schema(bodies::default_schema()),
        with_schema(json!({"type": "object", "properties": {"path": {"type": "string", "format": "uri"},
            "n": {"oneOf": [{"type": "integer"}, {"type": "string"}]}}, "dependentRequired": {"n": ["path"]}})),
    ]
}

#[test]
fn fuzz_seeds_reach_the_accepting_paths() {
    // Seeds that are refused at the first byte would make the mutated cases shallow.
    let root = quiver_tests::workspace_root();
    let text = std::fs::read_to_string(root.join("plugins/fs-tools/tool.yaml")).expect("read manifest");
    quiver_manifest::Manifest::from_yaml(&text, "tool.yaml").expect("the fs-tools manifest parses");
    let config = std::fs::read_to_string(root.join("quiver.yaml")).expect("read quiver.yaml");
    quiver_manifest::HostConfig::from_yaml(&config, "quiver.yaml").expect("quiver.yaml parses");
    let seeds = mcp_seeds();
    let (custom, standard) = seeds.split_last().expect("seeds");
    for seed in standard {
        assert!(quiver_mcp::fuzzing::decode(seed).is_ok(), "seed {} is refused", String::from_utf8_lossy(seed));
    }
    // The unknown method is the refusal path's seed.
    assert!(quiver_mcp::fuzzing::decode(custom).is_err());
    let args = json!({"path": "notes/a.txt", "action": "write", "n": 3, "tags": ["ab"], "nested": {"x": 1}});
    assert_eq!(quiver_router::fuzzing::validate_arguments(&bodies::default_schema(), &args), Ok(()));
    let bad = json!({"path": "", "n": 101, "extra": true});
    assert!(quiver_router::fuzzing::validate_arguments(&bodies::default_schema(), &bad).is_err());
}

#[test]
fn fuzz_signature_invariant_can_fail() {
    // The body's assertion is that nothing verifies; show that a real signature by the fixed key
    // over the fixed data does, so the assertion is not vacuous.
    let (fixed, trusted) = bodies::keys();
    let good = quiver_manifest::sign(fixed, bodies::SIGNED_DATA, "fuzz");
    assert!(quiver_manifest::verify(trusted, bodies::SIGNED_DATA, &good).is_ok());
    let outcome = std::panic::catch_unwind(|| bodies::signature(good.as_bytes()));
    assert!(outcome.is_err(), "the signature body accepted a valid signature without failing");
}

#[test]
fn fuzz_manifest_bounded() {
    run(1536, manifest_seeds(), bodies::manifest);
}

#[test]
fn fuzz_signature_bounded() {
    run(8192, signature_seeds(), bodies::signature);
}

#[test]
fn fuzz_mcp_message_bounded() {
    run(8192, mcp_seeds(), bodies::mcp_message);
}

#[test]
fn fuzz_arguments_bounded() {
    run(4096, argument_seeds(), bodies::arguments);
}

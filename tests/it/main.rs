//! End-to-end tests with real plugin libraries built by cargo and loaded through the real host.

mod aliases;
mod attacks;
mod fuzz;
#[path = "../../fuzz/bodies.rs"]
mod fuzz_bodies;
mod loader;

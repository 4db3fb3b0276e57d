//! End-to-end tests with real plugin libraries built by cargo and loaded through the real host.

mod aliases;
mod attacks;
mod loader;

//! One module per command. Each has an `Args` struct (clap) and a `run` function taking the
//! global flags and its arguments.

pub mod call;
pub mod completions;
pub mod config;
pub mod contract_test;
pub mod demo;
pub mod eval;
pub mod keygen;
pub mod list;
pub mod replay;
pub mod rollback;
pub mod search;
pub mod serve;
pub mod sign;
pub mod stats;
pub mod surface;
pub mod token;
pub mod verify;

//! One module per command. Each has an `Args` struct (clap) and a `run` function taking the
//! global flags and its arguments.
//!
//! Room for the commands still to come, one module each: `search` (query the catalog as an agent
//! would) and `eval` (`eval search`: search quality against labelled queries).

pub mod call;
pub mod contract_test;
pub mod keygen;
pub mod list;
pub mod replay;
pub mod serve;
pub mod sign;
pub mod stats;
pub mod verify;

//! custodian owns the lifecycle of what an agent runtime's tools create.
//!
//! # Theory of operation
//!
//! An agent runtime launches processes for tools, writes files for requests
//! and spills oversized tool results to disk. custodian makes three promises
//! about those and proves them:
//!
//! 1. **Governed processes** ([`process`]): no shell, a minimal environment,
//!    the child leads its own process group, `TERM → grace → KILL`, bounded
//!    capture, and one honest JSON evidence object. Every process settles
//!    exactly once.
//! 2. **Request-owned cleanup** ([`workspace`], [`coordinator`]): everything a
//!    request creates lives under its own job namespace and is registered in
//!    an ownership inventory. When the request ends, exactly one cleanup runs,
//!    removes only what the inventory proves the request owns, fails closed on
//!    anything suspicious, and finishes before the terminal result is
//!    committed.
//! 3. **Bounded spill retention** ([`spill`]): a one-shot startup sweep
//!    expires old spilled results and cannot be tricked into deleting anything
//!    else.
//!
//! Decisions are made in pure code ([`machine`], [`policy`]); the mechanisms
//! execute the actions those decisions return. The exactly-once primitives in
//! [`sync`] are checked under every interleaving by loom, and the state
//! machines by a stateright model that calls the very same step functions.
//!
//! Dependencies point one way: `machine`, `sync` and `policy` depend on
//! nothing else in the crate; `process`, `spill` and `workspace` build on
//! them; `coordinator` drives a request end to end; `wire` and the CLI sit on
//! top. See `docs/architecture.md`.

pub mod contain;
pub mod coordinator;
pub mod error;
pub mod machine;
pub mod policy;
pub mod process;
pub mod spill;
pub mod sync;
pub mod wire;
pub mod workspace;

//! The coordinator: racing terminal candidates, cancel, disconnect and
//! terminal-write failure against counting fakes and a real node handler,
//! plus a seeded stress run. Every test checks the request's event log
//! against the pure step function (see `support::check_log`).

#[path = "../support/fake_node.rs"]
mod fake_node;

mod forced_orders;
mod outcomes;
mod pinned;
mod scenarios;
mod stress;
mod support;
mod through_wire;
mod with_workspace;

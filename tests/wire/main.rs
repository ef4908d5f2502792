//! The edge–node wire: the node handler over an in-memory duplex, fed by the
//! real edge client and by raw hostile bytes.

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
#[path = "../support/fake_node.rs"]
mod fake_node;

mod cleanup_during_open;
mod cli;
mod containment;
mod crash;
mod e2e;
mod exhaustion;
mod guarded;
#[path = "../support/http.rs"]
mod http;
mod node_handler;
mod policy;
mod race;
mod read_order;
#[path = "../support/sandbox.rs"]
mod sandbox;
mod sessions;
mod signals;
mod spawn;
mod ssh;

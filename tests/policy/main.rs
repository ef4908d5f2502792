//! Integration tests of `custodian::policy`: properties of match targets, the
//! shipped example policies, and `custodian policy explain`.

#[macro_use]
#[path = "../support/skip.rs"]
mod skip;
mod cli;
mod examples;
mod output;
mod padding;
mod properties;

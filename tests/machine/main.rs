//! Integration tests of the pure machines: every (state, event) pair of each
//! machine, checked against a table.

mod request;

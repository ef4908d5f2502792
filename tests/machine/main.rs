//! Integration tests of the pure machines.

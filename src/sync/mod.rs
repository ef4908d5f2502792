//! Exactly-once primitives and the loom shim.

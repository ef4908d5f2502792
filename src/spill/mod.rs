//! The spill store and its one-shot startup retention sweep.

//! loom tests of custodian's exactly-once primitives (run under `--cfg custodian_loom`).

//! The process machine: `Running → Term → Kill → Settled`.

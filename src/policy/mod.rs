//! Policy for `process.run`: tool registry, exposure, match targets and approval overrides (pure: no I/O, no clock).

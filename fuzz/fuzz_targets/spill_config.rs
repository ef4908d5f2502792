//! Fuzzes the spill TOML config loader: never panics; an accepted config
//! has a valid prefix, absolute paths, and a period that maps to a cutoff
//! without overflow (0 = disabled).
#![no_main]

use std::time::SystemTime;

use custodian::spill::{SpillConfig, validate_prefix};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cfg) = SpillConfig::from_toml_str(text) {
        assert!(validate_prefix(&cfg.default_root_prefix).is_ok());
        assert!(cfg.root.as_ref().is_none_or(|r| r.is_absolute()));
        assert!(cfg.temp_dir.as_ref().is_none_or(|r| r.is_absolute()));
        let cutoff = cfg.cutoff(SystemTime::now());
        assert_eq!(cutoff.is_none(), cfg.cleanup_period_days == 0);
    }
});

//! A session's whole output, recorded as it arrives in spilled results of
//! its request (`process::session`, *Record*): one per stream, made at the
//! stream's first byte and listed among the request's spills, written up to
//! the runtime's cap ([`SessionRecord`]), the rest counted as dropped.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crate::machine::process::Stream;
use crate::process::session::{OutputRecord, Recorded, RecordedStream};
use crate::spill::SpillStore;
use crate::sync::lock_std as lock;

use super::hooks::Entry;

/// How a runtime records its sessions' output (with a spill store): each
/// stream's first `cap` bytes, in spilled results of the request under
/// the spill session `spill_session`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionRecord {
    /// Bytes recorded per stream; 0: no record. Default 64 MiB.
    pub cap: u64,
    /// The spill session the records are written under. Default
    /// `"sessions"`.
    pub spill_session: String,
}

impl SessionRecord {
    /// The default cap per stream: 64 MiB.
    pub const DEFAULT_CAP: u64 = 64 * 1024 * 1024;

    /// 64 MiB per stream, under the spill session `sessions`.
    pub fn new() -> Self {
        SessionRecord {
            cap: Self::DEFAULT_CAP,
            spill_session: "sessions".to_owned(),
        }
    }

    /// Replaces the cap (0: no record).
    #[must_use]
    pub fn with_cap(mut self, bytes: u64) -> Self {
        self.cap = bytes;
        self
    }

    /// Replaces the spill session (a valid spill session name, checked
    /// when the runtime opens).
    #[must_use]
    pub fn with_spill_session(mut self, session: impl Into<String>) -> Self {
        self.spill_session = session.into();
        self
    }
}

impl Default for SessionRecord {
    fn default() -> Self {
        Self::new()
    }
}

/// One session's record.
#[derive(Debug)]
pub(super) struct SpillRecord {
    store: Arc<SpillStore>,
    session: String,
    cap: u64,
    entry: Arc<Entry>,
    streams: [Mutex<Slot>; 2],
}

#[derive(Debug, Default)]
struct Slot {
    /// Open while recording.
    file: Option<std::fs::File>,
    /// `None`: nothing arrived yet.
    record: Option<RecordedStream>,
}

impl SpillRecord {
    pub(super) fn new(
        store: Arc<SpillStore>,
        settings: &SessionRecord,
        entry: Arc<Entry>,
    ) -> SpillRecord {
        SpillRecord {
            store,
            session: settings.spill_session.clone(),
            cap: settings.cap,
            entry,
            streams: Default::default(),
        }
    }
}

/// An I/O error's kind, as the evidence may show it (never a path).
fn kind(e: &std::io::Error) -> String {
    format!("{:?}", e.kind())
}

impl OutputRecord for SpillRecord {
    fn append(&self, stream: Stream, data: &[u8]) {
        let mut slot = lock(&self.streams[usize::from(stream == Stream::Stderr)]);
        let slot = &mut *slot;
        let record = slot
            .record
            .get_or_insert_with(|| match self.store.create(&self.session) {
                Ok((locator, file)) => {
                    self.entry.add_spill(locator.clone());
                    slot.file = Some(file);
                    RecordedStream::new(locator.to_string())
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a session's output record could not be made");
                    let mut failed = RecordedStream::new("");
                    failed.error = Some(match &e {
                        crate::spill::StoreError::Io { source, .. } => kind(source),
                        _ => "Refused".to_owned(),
                    });
                    failed
                }
            });
        let len = data.len() as u64;
        let take = (self.cap.saturating_sub(record.bytes)).min(len);
        if take > 0 {
            if let Some(file) = &mut slot.file {
                // `take` ≤ `data.len()`: the cast cannot truncate.
                match file.write_all(&data[..take as usize]) {
                    Ok(()) => {
                        record.bytes += take;
                        record.dropped += len - take;
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "a session's output record stopped");
                        record.error = Some(kind(&e));
                        slot.file = None;
                    }
                }
            }
        }
        record.dropped += if slot.file.is_some() { len - take } else { len };
    }

    fn finish(&self) -> Recorded {
        let take = |i: usize| {
            let mut slot = lock(&self.streams[i]);
            slot.file = None;
            slot.record.clone()
        };
        Recorded {
            stdout: take(0),
            stderr: take(1),
        }
    }
}

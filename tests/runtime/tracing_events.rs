//! The runtime's tracing: a `request` span per request with the `process`
//! spans beneath it; events at launch, settle, cleanup start and cleanup
//! result; nothing of the environment in any field.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Everything one test saw: spans (id, name, parent), events (span name,
/// message, every field as text).
#[derive(Default)]
pub struct Seen {
    pub spans: Vec<(u64, &'static str, Option<u64>)>,
    pub events: Vec<(Option<&'static str>, String, String)>,
}

/// A minimal subscriber recording spans and events; current-span
/// bookkeeping is per thread, enough for a current-thread runtime.
pub struct Recorder {
    pub seen: Arc<Mutex<Seen>>,
    metadata: Mutex<Vec<(u64, &'static Metadata<'static>)>>,
    next: AtomicU64,
    stack: Mutex<Vec<u64>>,
}

impl Recorder {
    pub fn new() -> (Self, Arc<Mutex<Seen>>) {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let r = Recorder {
            seen: Arc::clone(&seen),
            metadata: Mutex::new(Vec::new()),
            next: AtomicU64::new(1),
            stack: Mutex::new(Vec::new()),
        };
        (r, seen)
    }
}

#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
        self.fields
            .push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let parent = if attrs.is_root() {
            None
        } else if let Some(p) = attrs.parent() {
            Some(p.into_u64())
        } else {
            self.stack.lock().unwrap().last().copied()
        };
        self.seen
            .lock()
            .unwrap()
            .spans
            .push((id, attrs.metadata().name(), parent));
        self.metadata.lock().unwrap().push((id, attrs.metadata()));
        Id::from_u64(id)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut text = Text::default();
        event.record(&mut text);
        let span = match event.parent() {
            Some(p) => Some(p.into_u64()),
            None if event.is_root() => None,
            None => self.stack.lock().unwrap().last().copied(),
        };
        let mut seen = self.seen.lock().unwrap();
        let name = span.and_then(|s| seen.spans.iter().find(|x| x.0 == s).map(|x| x.1));
        seen.events.push((name, text.message, text.fields));
    }

    /// `Span::current()` (and so `in_current_span`) asks for this.
    fn current_span(&self) -> tracing_core::span::Current {
        let top = self.stack.lock().unwrap().last().copied();
        let meta = top.and_then(|id| {
            self.metadata
                .lock()
                .unwrap()
                .iter()
                .find(|m| m.0 == id)
                .map(|m| m.1)
        });
        match (top, meta) {
            (Some(id), Some(meta)) => tracing_core::span::Current::new(Id::from_u64(id), meta),
            _ => tracing_core::span::Current::none(),
        }
    }

    fn enter(&self, span: &Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut stack = self.stack.lock().unwrap();
        if let Some(i) = stack.iter().rposition(|s| *s == span.into_u64()) {
            stack.remove(i);
        }
    }
}

//! Every model configuration by name, for the `explore` and
//! `counterexample` commands.

use std::collections::BTreeSet;
use std::fmt;
use std::hash::Hash;

use stateright::{Checker, Expectation, HasDiscoveries};

use crate::actor;
use crate::explain::{Diagram, Narrate};
use crate::process::{self, ProcessModel};
use crate::request::{self, RequestModel};

/// Something done with one named model, whatever its type.
pub trait Visit {
    /// What the visit returns.
    type Out;
    /// Called with the model and the property it is meant to break (`None`
    /// for a real model).
    fn visit<M>(self, model: M, breaks: Option<&'static str>) -> Self::Out
    where
        M: Narrate + Send + Sync + 'static,
        M::State: fmt::Debug + Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: fmt::Debug + Clone + PartialEq + Send + Sync + 'static;
}

/// The names [`with`] knows, real models first.
pub const NAMES: [&str; 28] = [
    "request",
    "process",
    "composition",
    "composition/2-requests",
    "request/broken/double-cleanup",
    "request/broken/complete-before-cleanup",
    "request/broken/success-despite-cleanup-failure",
    "request/broken/republish-on-duplicate",
    "request/broken/cleanup-before-stop",
    "request/broken/accept-late-open",
    "request/broken/publish-not-the-result",
    "process/broken/signal-after-settle",
    "process/broken/settle-twice",
    "process/broken/kill-before-grace",
    "process/broken/timer-rearmed",
    "process/broken/hard-before-grace",
    "process/broken/cause-dropped",
    "process/broken/drop-kills-unsafely",
    "composition/broken/open-before-announce",
    "composition/broken/cleanup-per-message",
    "composition/broken/complete-before-cleanup-answer",
    "composition/broken/early-answer",
    "composition/broken/replay-across-restart",
    "composition/broken/cleanup-never-started",
    "composition/broken/open-during-cleanup",
    "composition/broken/shutdown-without-cleanup",
    "composition/broken/evicts-in-flight",
    "composition/broken/forgets-a-cancelled-failed-open",
];

/// Calls `v` with the model called `name` (`waiters` waiters for a request
/// model); `None` if there is no such model.
pub fn with<V: Visit>(name: &str, waiters: usize, v: V) -> Option<V::Out> {
    use process::broken as pb;
    use request::broken as rb;
    fn req<S: request::RequestStep + Copy, V: Visit>(s: S, w: usize, v: V) -> V::Out {
        v.visit(RequestModel::new(s, w), s.breaks())
    }
    fn pro<S: process::ProcessStep + Copy, V: Visit>(s: S, v: V) -> V::Out {
        v.visit(ProcessModel::new(s), s.breaks())
    }
    fn com<V: Visit>(variant: actor::Variant, w: usize, v: V) -> V::Out {
        let restarts = usize::from(matches!(
            variant,
            actor::Variant::Real | actor::Variant::ReplayAcrossRestart
        ));
        v.visit(actor::model(variant, w, restarts), variant.breaks())
    }
    Some(match name {
        "request" => req(request::Real, waiters, v),
        "composition" => com(actor::Variant::Real, waiters, v),
        "composition/2-requests" => v.visit(actor::pair::model(actor::Variant::Real), None),
        "composition/broken/evicts-in-flight" => v.visit(
            actor::pair::model(actor::Variant::EvictsInFlight),
            actor::Variant::EvictsInFlight.breaks(),
        ),
        "composition/broken/forgets-a-cancelled-failed-open" => v.visit(
            actor::pair::model(actor::Variant::ForgetsACancelledFailedOpen),
            actor::Variant::ForgetsACancelledFailedOpen.breaks(),
        ),
        "composition/broken/open-before-announce" => {
            com(actor::Variant::OpenBeforeAnnounce, waiters, v)
        }
        "composition/broken/cleanup-per-message" => {
            com(actor::Variant::CleanupPerMessage, waiters, v)
        }
        "composition/broken/complete-before-cleanup-answer" => {
            com(actor::Variant::CompleteBeforeCleanupAnswer, waiters, v)
        }
        "composition/broken/early-answer" => com(actor::Variant::EarlyAnswer, waiters, v),
        "composition/broken/replay-across-restart" => {
            com(actor::Variant::ReplayAcrossRestart, waiters, v)
        }
        "composition/broken/cleanup-never-started" => {
            com(actor::Variant::CleanupNeverStarted, waiters, v)
        }
        "composition/broken/open-during-cleanup" => {
            com(actor::Variant::OpenDuringCleanup, waiters, v)
        }
        "composition/broken/shutdown-without-cleanup" => {
            com(actor::Variant::ShutdownWithoutCleanup, waiters, v)
        }
        "composition/broken/answers-a-cancel-as-an-open" => {
            com(actor::Variant::AnswersACancelAsAnOpen, waiters, v)
        }
        "process" => pro(process::Real, v),
        "request/broken/double-cleanup" => req(rb::DoubleCleanup, waiters, v),
        "request/broken/complete-before-cleanup" => req(rb::CompleteBeforeCleanup, waiters, v),
        "request/broken/success-despite-cleanup-failure" => {
            req(rb::SuccessDespiteCleanupFailure, waiters, v)
        }
        "request/broken/republish-on-duplicate" => req(rb::RepublishOnDuplicate, waiters, v),
        "request/broken/cleanup-before-stop" => req(rb::CleanupBeforeStop, waiters, v),
        "request/broken/success-skips-stop" => req(rb::SuccessSkipsStop, waiters, v),
        "request/broken/accept-late-open" => req(rb::AcceptLateOpen, waiters, v),
        "request/broken/publish-not-the-result" => req(rb::PublishNotTheResult, waiters, v),
        "process/broken/signal-after-settle" => pro(pb::SignalAfterSettle, v),
        "process/broken/settle-twice" => pro(pb::SettleTwice, v),
        "process/broken/kill-before-grace" => pro(pb::KillBeforeGrace, v),
        "process/broken/timer-rearmed" => pro(pb::TimerRearmed, v),
        "process/broken/hard-before-grace" => pro(pb::HardBeforeGrace, v),
        "process/broken/cause-dropped" => pro(pb::CauseDropped, v),
        "process/broken/drop-kills-unsafely" => pro(pb::DropKillsUnsafely, v),
        "process/broken/interrupt-anytime" => pro(pb::InterruptAnytime, v),
        _ => return None,
    })
}

/// Why no diagram could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiagramError {
    /// No model has this name.
    UnknownModel(String),
    /// The model has no property of this name (its properties are listed).
    UnknownProperty(String, Vec<&'static str>),
    /// A real model was named without a property.
    NoProperty,
    /// The checker found no path for the property: an `always` that holds,
    /// or a `sometimes` never reached.
    NotFound(String),
}

impl fmt::Display for DiagramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiagramError::UnknownModel(m) => {
                write!(f, "unknown model {m:?}; models: {}", names().join(", "))
            }
            DiagramError::UnknownProperty(p, all) => {
                write!(f, "unknown property {p:?}; properties: {}", all.join(" | "))
            }
            DiagramError::NoProperty => {
                write!(
                    f,
                    "a real model needs --property (its violations or examples)"
                )
            }
            DiagramError::NotFound(p) => write!(f, "no path found for {p:?}"),
        }
    }
}

impl std::error::Error for DiagramError {}

/// The model names.
pub fn names() -> Vec<&'static str> {
    NAMES.to_vec()
}

struct Counterexample<'a> {
    name: &'a str,
    property: Option<&'a str>,
}

impl Visit for Counterexample<'_> {
    type Out = Result<Diagram, DiagramError>;

    fn visit<M>(self, model: M, breaks: Option<&'static str>) -> Self::Out
    where
        M: Narrate + Send + Sync + 'static,
        M::State: fmt::Debug + Hash + Clone + PartialEq + Send + Sync + 'static,
        M::Action: fmt::Debug + Clone + PartialEq + Send + Sync + 'static,
    {
        let props = model.properties();
        let wanted = self.property.or(breaks).ok_or(DiagramError::NoProperty)?;
        let Some(p) = props.iter().find(|p| p.name == wanted) else {
            let all = props.iter().map(|p| p.name).collect();
            return Err(DiagramError::UnknownProperty(wanted.to_owned(), all));
        };
        let (name, kind, condition) = (p.name, p.expectation.clone(), p.condition);
        let checker = model
            .checker()
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([name])))
            // One thread: with more, a later (longer) path to a sticky
            // violation may overwrite the first one found.
            .threads(1)
            .spawn_bfs()
            .join();
        let path = checker
            .discovery(name)
            .ok_or_else(|| DiagramError::NotFound(name.to_owned()))?;
        // The checker keeps exploring its current batch after the first
        // discovery and records the last one found; cut the path at the
        // first state that decides the property.
        let mut steps = path.into_vec();
        let decided = |s: &M::State| match kind {
            Expectation::Sometimes => condition(checker.model(), s),
            Expectation::Always | Expectation::Eventually => !condition(checker.model(), s),
        };
        if let Some(i) = steps.iter().position(|(s, _)| decided(s)) {
            steps.truncate(i + 1);
            if let Some(last) = steps.last_mut() {
                last.1 = None;
            }
        }
        let what = match kind {
            Expectation::Sometimes => "example of",
            Expectation::Always | Expectation::Eventually => "counterexample to",
        };
        let title = format!("{}: {what} \"{name}\"", self.name);
        let label = match kind {
            Expectation::Sometimes => format!("reached: {name}"),
            _ => format!("VIOLATED: {name}"),
        };
        Ok(Diagram::from_path(checker.model(), title, steps, &label))
    }
}

/// The shortest path (breadth-first) that breaks `property` (or, for a broken
/// variant without `property`, the property it is meant to break) in the
/// model called `name`, as a sequence diagram.
///
/// # Errors
///
/// [`DiagramError`] when the model or property is unknown or no path
/// exists.
pub fn counterexample(
    name: &str,
    property: Option<&str>,
    waiters: usize,
) -> Result<Diagram, DiagramError> {
    with(name, waiters, Counterexample { name, property })
        .unwrap_or_else(|| Err(DiagramError::UnknownModel(name.to_owned())))
}

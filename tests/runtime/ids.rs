//! One request id rule for the whole crate: the coordinator, the workspace,
//! the wire and the runtime take the same type, and what it refuses no
//! layer accepts.

use std::any::TypeId;

use custodian::{RequestId, RequestIdError};

#[test]
fn every_layer_names_the_same_request_id_type() {
    let root = TypeId::of::<RequestId>();
    assert_eq!(root, TypeId::of::<custodian::request::RequestId>());
    assert_eq!(root, TypeId::of::<custodian::workspace::RequestId>());
    assert_eq!(root, TypeId::of::<custodian::id::RequestId>());
}

/// The wire used to accept `.x` (its own rule refused only `.` and `..`)
/// while the workspace refused it: an edge could send an id that no node
/// could ever open.
#[test]
fn a_leading_dot_is_refused_on_the_wire_and_by_the_workspace_alike() {
    for bad in [".x", ".hidden", ".", ".."] {
        assert_eq!(
            RequestId::new(bad),
            Err(RequestIdError::LeadingDot),
            "{bad:?}"
        );
        let frame = format!(r#"{{"op":"open_workspace","request_id":"{bad}"}}"#);
        assert!(
            serde_json::from_str::<custodian::wire::message::Operation>(&frame).is_err(),
            "the wire accepted {bad:?}"
        );
    }
    let ok = r#"{"op":"open_workspace","request_id":"x.y-z_1"}"#;
    assert!(serde_json::from_str::<custodian::wire::message::Operation>(ok).is_ok());
}

#[test]
fn the_workspace_accepts_exactly_the_valid_ids() {
    let dir = tempfile::tempdir().unwrap();
    let ws = custodian::workspace::Workspace::open(dir.path(), Default::default()).unwrap();
    let long = "z".repeat(RequestId::MAX_LEN);
    let too_long = "z".repeat(RequestId::MAX_LEN + 1);
    for (i, candidate) in [
        "a", "r-1", "a.b", "a..", &long, ".x", "", "a/b", "a b", "é", &too_long,
    ]
    .into_iter()
    .enumerate()
    {
        let valid = RequestId::new(candidate).is_ok();
        // Opening creates a directory: only ever in this temp dir, and
        // nothing is removed here.
        let opened = ws.open_request(candidate).is_ok();
        assert_eq!(valid, opened, "case {i}: {candidate:?}");
    }
}

//! Typed, versioned edge–node messages (JSON lines) and the node-side handler.

//! The governed process launcher (`process.run`).

//! Request-owned job namespaces, the ownership inventory, and fail-closed exactly-once cleanup.

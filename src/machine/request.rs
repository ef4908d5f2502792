//! The request machine: `Open → Finalizing → Cleaning → Acknowledged → Completed`.

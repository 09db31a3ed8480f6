//! service (placeholder, see issues)

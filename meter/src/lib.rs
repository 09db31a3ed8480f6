//! meter (placeholder, see issues)

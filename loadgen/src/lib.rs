//! loadgen (placeholder, see issues)

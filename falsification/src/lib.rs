//! falsification (placeholder, see issues)

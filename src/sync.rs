//! std or loom.

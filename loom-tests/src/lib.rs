//! Models live in tests/.

//! Result-cache storage tiers.

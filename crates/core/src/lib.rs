//! mailvault engine.

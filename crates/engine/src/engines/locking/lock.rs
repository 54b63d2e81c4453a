//! Lock manager (being written).

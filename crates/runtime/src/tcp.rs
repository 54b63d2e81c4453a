//! TCP runtime (being written).

//! Unit tests of coordfree, named after its rules.

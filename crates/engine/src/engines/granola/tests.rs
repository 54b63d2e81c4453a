//! Rule tests, named after the paper's sections.

//! The in-process reader end to end; the reader's own tests (synthetic images of each
//! version, live interpreters read from outside) are in `mlprof-pyframes`.

mod embedded;

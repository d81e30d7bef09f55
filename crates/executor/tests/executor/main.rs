//! Executor tests with real processes (`sh -c` scripts): one binary, one module per concern.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

mod adopt;
mod checkpoint;
mod isolation;
mod protocol;
mod reap;
mod run;
mod stop;
mod world;
mod zygote;

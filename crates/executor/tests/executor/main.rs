//! Executor tests with real processes (`sh -c` scripts): one binary, one module per concern.

mod checkpoint;
mod isolation;
mod reap;
mod run;
mod stop;
mod world;

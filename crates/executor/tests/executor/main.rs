//! Executor tests with real processes (`sh -c` scripts): one binary, one module per concern.

mod adopt;
mod checkpoint;
mod isolation;
mod protocol;
mod reap;
mod run;
mod stop;
mod world;
mod zygote;

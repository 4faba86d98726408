//! `wstune serve`: the one resolved configuration (`config`), built once by `cli::resolve` from
//! the flags and the profile and handed to child servers as versioned JSON, never as a rebuilt
//! command line.

pub mod config;

//! `wstune serve`: the one resolved configuration (`config`), built once by `cli::resolve` from
//! the flags and the profile and handed to child servers as versioned JSON, never as a rebuilt
//! command line; serve proper (`run`), its `--processes` supervisor (`supervisor`) and cluster
//! backplane (`backplane`: Redis, Sentinel, Redis Cluster or NATS, with channel history in
//! Redis Streams), and `--self-test` around the servers it starts (`self_test`; a child
//! `serve --processes N` through `child`).

pub mod backplane;
pub mod child;
pub mod config;
pub mod config_error;
pub mod run;
pub mod self_test;
mod self_test_restart;
pub mod supervisor;

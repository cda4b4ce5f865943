//! `runner sandbox serve --stdio`: one runner sandbox, served to another program over its
//! standard input and output, as long as that program keeps the pipe open.
//!
//! Evaluation harnesses (inspect_ai, Harbor) drive their sandboxes from Python: they start
//! one per sample or trial, run commands in it, move files in and out, and end it. Giving
//! them runner's wall must not mean rewriting the wall in Python. So the Python side is a
//! thin client (`python/runner_sandbox`), and everything that makes the wall is here, the
//! same code `runner run` and `runner exec` use: the sandbox from the profile and flags,
//! the allow-list's proxy judging every connection by the permission rules, the audit
//! trail. The client only ever asks; it never holds a descriptor into the sandbox.
//!
//! The conversation is JSON lines ([`wire`]): the first line says the sandbox is up, then
//! every request line gets answered by the line carrying its id, out of order when
//! requests overlap (each runs in a task of its own, as the sandbox's server runs each
//! command in a thread of its own). A request's command is built without a shell ever
//! reading what the client sent ([`command`]).
//!
//! The sandbox ends when the client closes runner's standard input, or runner gets
//! SIGTERM or SIGINT: the running requests are dropped, the server and every process it
//! started are killed, a task image's container is removed, before this returns.

pub mod command;
pub mod open;
pub mod wire;

mod serve;

pub use open::{OpenFailure, Opened, TaskImageOptions, open};
pub use serve::{Served, lines_of, serve};

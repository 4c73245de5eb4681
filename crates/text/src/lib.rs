//! The bottom of agent.nvim's crate graph: text as a person is shown it. It knows no other crate
//! of the workspace and nothing of agents, tools or front ends: strings in, strings out.
//!
//! - [`escape`]: every hidden character made visible, blank runs squeezed, lines cut by
//!   character; what the approval's title and preview show.
//! - [`ansi`]: a command's coloured output as the text and the colours a chat can show.
//! - [`diff`]: unified diffs of two texts.
//! - [`text`]: bounds on text (characters kept, what was cut).
//! - [`secrets`]: the keys in use, replaced with `[redacted]` wherever text leaves the process.
//! - [`time`]: a UTC date and time from a `SystemTime`.

pub mod ansi;
pub mod diff;
pub mod escape;
pub mod secrets;
pub mod text;
pub mod time;

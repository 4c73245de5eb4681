//! A question a person answers before a call runs, and their answer: what the gate asks and the
//! front ends show. Data only.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What a request is about; this decides what "Allow for this session" covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// An edit or a create by edit_file. A session grant covers edits to any file in the workspace.
    Edit { rel: String },
    /// A run_bash command. A session grant covers this exact command line only.
    Command { command: String },
}

/// One question: what a person is shown before a call, and what a session grant would cover. A
/// mutating tool's plan carries one (the tools' `Plan`); the gate hands it to the asker
/// when nothing allows the call already. It has no id: a front end that must match an answer to
/// its question numbers it in its own registry (`questions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// The tool asking (`edit_file`, `run_bash`).
    pub tool: &'static str,
    /// Exactly what is about to happen (`edit src/a.rs (replace 3 chars with 5)`, or the command).
    pub detail: String,
    /// For edits: the unified diff.
    pub diff: Option<String>,
    /// What a session grant would cover.
    pub action: Action,
    /// What a person may change before allowing ("Edit before allowing"); None: it cannot be
    /// changed (a file that is not UTF-8 text).
    pub proposal: Option<Proposed>,
}

/// A proposal a person may edit before allowing it: the text they are given to change, and
/// what it is changed against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proposed {
    /// edit_file: the whole file as the edit would leave it, beside the file as it is (None
    /// for a create).
    File {
        /// The file as it is now (the text the diff was made from); None: it does not exist.
        now: Option<Arc<str>>,
        /// The file as the edit would leave it.
        proposed: Arc<str>,
    },
    /// run_bash: the command line, as the model wrote it.
    Command,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// This call only.
    AllowOnce,
    /// This call, and the calls its [`Action`] scope covers, until the session ends.
    AllowSession,
    /// Every call until the session ends.
    AllowAll,
    /// This call, and from now on in this workspace (saved by the permissions module):
    /// this exact command line, or every edit.
    AllowProject,
    /// This call once, with the person's version of the proposal instead of the model's
    /// ([`ApprovalRequest::proposal`]): the whole new file, or the command line to run.
    Edited { text: String },
    /// Not this call; an optional reason is passed to the model.
    Refuse { reason: Option<String> },
}

//! The crate's one error type. Tool failures are not errors: they are [`agent_nvim_vocab::tools::ToolResult`]s
//! the model reads. These are the failures that stop a front end or a request.

use std::path::PathBuf;

/// Every failure a front end reports to its user.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Returned by the command-line parsers: the user typed something we do not understand.
    #[error("{0}")]
    Usage(String),
    /// Returned by front ends when the provider cannot be configured (no key, unknown name).
    #[error("agent: {0}")]
    Provider(#[from] crate::llm::ProviderError),
    /// Returned by [`crate::workspace::Workspace::new`] when the root cannot be used.
    #[error("agent: cannot use workspace root {path}: {source}")]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A saved conversation could not be found, read or continued.
    #[error("agent: {0}")]
    Session(String),
    /// Returned by front ends when their own input or output fails (a closed terminal, a broken pipe).
    #[error("agent: {context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

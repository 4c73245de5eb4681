//! The crate's one error type. Tool failures are not errors: they are [`agent_nvim_vocab::tools::ToolResult`]s
//! the model reads. These are the failures that stop a front end or a request.

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
    #[error("agent: {0}")]
    Workspace(#[from] crate::workspace::RootError),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_root_that_cannot_be_used_is_said_with_the_front_ends_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret.txt");
        std::fs::write(&file, "x").unwrap();
        let err: Error = crate::workspace::Workspace::new(&file).unwrap_err().into();
        let file = std::fs::canonicalize(&file).unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "agent: cannot use workspace root {}: not a directory",
                file.display()
            )
        );
    }

    #[test]
    fn a_provider_that_cannot_be_configured_is_said_with_the_front_ends_prefix() {
        let choice = crate::llm::ProviderChoice {
            provider: Some("openai".into()),
            ..Default::default()
        };
        let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "k".to_string());
        let err = crate::llm::ProviderConfig::resolve(&choice, &env).unwrap_err();
        assert_eq!(
            Error::from(err).to_string(),
            "agent: the OPENAI_API_KEY environment variable is not set; set it to use this provider"
        );
    }
}
